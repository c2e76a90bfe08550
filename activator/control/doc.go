// Package control is the activator's control loops, controller-runtime
// controllers in one manager (loops.go):
//   - sources (every replica) keeps the request path's routing table and
//     endpoints from AppRoutes, DomainClaims, Services and EndpointSlices,
//     through Table;
//   - handoff and propagation (the replica that holds its pool's Lease,
//     leadership.go) write the hand-off EndpointSlices that point an app at
//     zero at the pool's ready activators, and the Admitted/Propagated
//     conditions;
//   - the cold-start watcher and status (coldwatch.go) see a cold start's
//     phases on the API server and record the last one in the AppRoute.
//
// It imports package proxy only for the types the table is made of.
package control
