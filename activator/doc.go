// Package activator is ebb-activator: it holds requests for apps that have
// no ready pod, tells the scaler at once (internal/holdpush), and forwards
// the held requests the moment a pod's app is ready; warm requests that
// still reach it are proxied straight through. Options: ebb-activator -h.
//
// It is two halves that Run wires together, and an admin server:
//   - package proxy is the request path: the data port's server, the
//     Router (routing table, hold queues, parking of held requests,
//     upstreams, cold-start marks). It reads nothing from the API server.
//   - package control is the control loops: the sources that keep the
//     Router's table and endpoints (every replica, through the small
//     control.Table interface: SetRoutes, SetEndpoints), and, on the pool's
//     elected replica, the hand-off slices and the Propagated conditions;
//     with the cold-start status and the leadership.
//
// The admin port serves /healthz, /readyz (not ready while draining or
// while the routing table is stale), /metrics and control.RoutingPath.
package activator
