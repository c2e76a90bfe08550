// Package activator is ebb-activator: it holds requests for apps that have no
// ready pod, tells the scaler at once (internal/holdpush), and forwards the
// held requests the moment a pod's app is ready, probing not-ready sidecars'
// /ready (which follows the app's own readiness probe) so it does not wait
// on EndpointSlice propagation. Warm requests
// that still reach it are proxied straight through, round robin over the
// app's ready endpoints and never counted as held: HTTP/1.1 (WebSocket and
// SSE included) by the hand-written engine of package internal/http1
// (Server: one keep-alive pool per endpoint, built once, dropped with
// the endpoint), anything else by net/http, to which the Server hands
// the connection (h2c/gRPC, held requests, 404s; one reverse proxy per
// upstream, one shared buffer pool).
//
// Its parts: the Router (routing by package routing, bounded per-app hold
// queues, cold-start timeouts, placeholder page), the sources that feed it
// from AppRoute, Service and EndpointSlice informers (plus a full re-list
// every --resync), and two controllers run by the replica that holds the
// instance's Lease: the endpoint hand-off controller (one EndpointSlice per
// Service, managed-by activator.<suffix>, pointing at the ready activator
// pods while the app has no ready endpoint or its Deployment is at 0) and
// the propagation controller (GET /routing on every ready replica; the
// AppRoute's Propagated condition, applied server-side under the
// "ebb-activator" field manager, is True only when all serve its generation).
// Only a Ready replica campaigns for the Lease, and any replica deletes the
// Lease of a holder whose pod is gone or not Ready (a crash, a hang) and
// campaigns again at once (leadership), so a dead replica leaves every
// hand-off slice within the kubelet's report plus a few API round trips.
//
// # Answers
//
// Unknown host → 404 naming the host; hold queue full (per app: AppRoute
// spec.queueSize, else --queue-size; or --max-held across apps) → 503 with
// Retry-After; cold-start timeout (spec.coldStartTimeout, else
// --cold-start-timeout) → 504 naming the app and the wait. A client that
// leaves frees its slot at once. With the AppRoute annotation
// <suffix>/placeholder: "true", a GET with Accept: text/html during a cold
// start gets a small self-refreshing page (503) and counts as held for 2 s.
//
// # Holding
//
// A held HTTP/1.x request costs no goroutine, net/http buffers or timer
// (park.go): its connection is hijacked, its head kept as bytes, its
// deadline in one heap under one timer, and the client hanging up is seen
// by one epoll set watching EPOLLRDHUP, so the body is never read and a
// client that leaves mid-body frees its slot at once. On release, timeout
// or deletion the connection goes to the Router's re-entry server, which
// reads the head again and answers it as a warm request would be answered
// (or 504/503), keeping the connection alive. h2c streams, and every
// request on platforms without epoll, wait in their handler instead.
// Run calls Router.Shutdown after the data server's, since the latter
// does not track hijacked connections.
//
// # Metrics
//
//	| name                                        | type      | labels          |
//	|---------------------------------------------|-----------|-----------------|
//	| ebb_activator_held_requests                 | gauge     | namespace, app  |
//	| ebb_activator_cold_start_duration_seconds   | histogram | namespace, app  |
//	| ebb_activator_cold_start_timeouts_total     | counter   | namespace, app  |
//	| ebb_activator_queue_full_total              | counter   | namespace, app  |
//	| ebb_activator_requests_total                | counter   | outcome         |
//	| ebb_activator_routes                        | gauge     | —               |
//	| ebb_activator_handoff_slices                | gauge     | —               |
package activator
