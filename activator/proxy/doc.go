// Package proxy is the activator's request path: Server (the data port:
// warm HTTP/1.1 through internal/http1, everything else handed to
// net/http) → Router (routes by Host and path with package
// internal/routing; proxies to a ready endpoint through its upstream, or
// holds) → parking (held HTTP/1.1 requests, parked in the engine that
// parsed them and sent by it once released: one parse, one send). Its routing
// table and endpoints are set from outside (SetRoutes, SetEndpoints: the
// activator's control loops); it makes no API request of its own except
// through the ColdStartWatcher it is given.
//
// Invariants:
//   - A held request costs no goroutine: its head is kept as bytes, its
//     deadline in one heap, its hang-up seen by one epoll set; its body is
//     never read while held.
//   - Per-app and global hold limits answer 503 with Retry-After, the
//     cold-start timeout 504; a client that leaves frees its slot at once.
//   - A request a route's static response answers (any rule while the
//     app has no ready pod, an Always rule while it has one) is answered
//     from the rule: never held, counted or told to the scaler. Only a
//     canonical path matches (internal/staticanswer).
//   - A held request goes to its route's fallback Service (its ClusterIP,
//     from the cache) at the cold-start timeout or when a queue or cap is
//     full, sent whole as received; when the fallback fails before its
//     answer's head, the client gets the 504 or 503 it would have got.
//   - A request forwarded (warm, released, or to a fallback) is bounded by
//     its route's timeouts (AppConfig.Timeouts) or the Router's.
//   - An activator never forwards to an activator (the control loops leave
//     hand-off slices out of every endpoint set).
//   - Shutdown answers whatever the data port took before it returns: a
//     held request gets its app's answer or its 504, a released or proxied
//     one its answer; only when the activator must exit first (Shutdown's
//     context ends) is a request still held answered 503 with Retry-After,
//     and only connections still busy answerGrace later are cut.
package proxy
