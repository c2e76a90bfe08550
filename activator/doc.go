// Package activator is ebb-activator: it holds requests for apps that have
// no ready pod, tells the scaler at once (internal/holdpush), and forwards
// the held requests the moment a pod's app is ready; warm requests that
// still reach it are proxied straight through. Options: ebb-activator -h.
//
// The request path: Server (the data port: warm HTTP/1.1 through
// internal/http1, everything else handed to net/http) → Router (routes by
// Host and path with package routing; proxies to a ready endpoint through
// its upstream, or holds) → parking (held HTTP/1.x connections, hijacked).
// The control loops (controller-runtime, loops.go): sources keeps the
// Router's table and endpoints (every replica); handoff and propagation
// write hand-off EndpointSlices and the Propagated condition (the replica
// that holds the Lease, leadership in run.go).
//
// Invariants:
//   - A held request costs no goroutine: its head is kept as bytes, its
//     deadline in one heap, its hang-up seen by one epoll set; its body is
//     never read while held.
//   - Per-app and global hold limits answer 503 with Retry-After, the
//     cold-start timeout 504; a client that leaves frees its slot at once.
//   - An activator never forwards to an activator (hand-off slices are
//     left out of every endpoint set).
//   - Only a Ready replica leads, and any replica releases the Lease of a
//     holder whose pod is gone or not Ready, so a dead leader's replicas
//     leave every hand-off slice within a few API round trips.
package activator
