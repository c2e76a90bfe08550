// Package control is the activator's control loops, controller-runtime
// controllers in one manager (loops.go):
//   - sources (every replica) keeps the request path's routing table and
//     endpoints from AppRoutes, DomainClaims, Services and EndpointSlices,
//     through Table;
//   - handoff and propagation (the replica that holds its pool's Lease,
//     leadership.go) write the hand-off EndpointSlices that point an app at
//     zero, or idle and about to go to zero, at the pool's ready activators,
//     and the Admitted/Propagated conditions;
//   - the cold-start watcher and status (coldwatch.go) see a cold start's
//     phases on the API server and record the last one in the AppRoute.
//
// It imports package proxy only for the types the table is made of.
//
// # Who writes the hand-off slices, and what they list
//
// What a slice means. A hand-off slice lists the activators an app's
// clients may be sent to. It lists exactly the pool's activator pods that
// the API server shows as able to serve: not being deleted, Running,
// Ready, every container running and ready (canServe). That is the
// kubelet's word: it runs the pod, sees its process exit (its PLEG relist,
// every second) and probes its readiness, and writes what it saw into the
// pod's status. It is what the EndpointSlice controller publishes for every
// Service, so an activator is in a hand-off slice exactly when a Service
// selecting it would route to it.
//
// One writer at a time. The replica that holds the pool's Lease
// (client-go's leader election) writes the slices; a replica campaigns
// only while it can serve itself and steps down (releasing the Lease) when
// it cannot. Any replica that can serve deletes the Lease of a holder whose
// pod cannot serve or is gone, again on the kubelet's word only: its cache
// says so, and the API server, read at that moment, confirms it (a cache
// lags: a pod created since, a status changed since); the delete has the
// Lease's resourceVersion as a precondition, and the replica campaigns at
// once. Election alone cannot keep a crashed holder's term short: its Lease
// lasts LeaseDuration (15 s) after its last renewal, during which nobody
// would take a crashed replica out of the slices; the kubelet reports the
// crash within about a second.
//
// Every campaigning replica watches the Lease (one watch on one object):
// a holder whose Lease is deleted or taken ends its term when the watch
// shows it, within an API round trip, and at the latest when its next
// renewal (every RetryPeriod, 2 s) reads another holder (decide: step
// down), not after RenewDeadline (10 s) of failed renewals; a replica that
// waits campaigns as soon as the watch shows the Lease deleted or released
// (a holder on its way out empties it), not at its election's next
// jittered retry (2–4.4 s).
//
// Why that is safe. The Lease is an economy, not the safety: whoever
// writes — the holder, or, for a moment after a release (an API round
// trip while the Lease's watch is up, at most RetryPeriod and a decide
// poll, 2.1 s, when it is not), an old holder that has not seen it yet —
// computes the slices from the same API state by the same function
// (decide), so concurrent writers converge to the same content, and none
// ever removes an activator the kubelet reports able to serve. No
// replica's own observation of another (a refused or timed-out
// connection, a missed answer) is evidence: a network policy, a partition
// between two replicas or a full accept queue refuse as a crash does, and
// a replica that two others cannot reach may still be reachable by the
// clients kube-proxy sends to it. A replica partitioned from the API
// server cannot write at all; one partitioned from its peers changes
// nothing.
//
// decide (decide.go) is that argument as code, the one place that says who
// campaigns, steps down or releases a Lease and which activators the
// slices list; its table test is TestDecide.
package control
