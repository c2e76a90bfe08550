// Package sidecar is ebb-sidecar, the per-pod counting reverse proxy that sits
// between an app's Service and the app container. It owns the hot path of
// every request the app serves: a hand-tuned HTTP/1.1 proxy (keep-alive,
// Upgrade/WebSocket tunnels, streamed bodies), a fallback to net/http for h2c
// and gRPC, the in-flight gauge and request counter the scaler reads, the
// admin endpoints and the graceful drain on SIGTERM.
//
// # Options
//
// Every option is a flag with an environment fallback (flag wins over env,
// env wins over the default):
//
//	--listen           EBB_LISTEN            :8012            client traffic
//	--upstream         EBB_UPSTREAM          127.0.0.1:8080   the app (host:port)
//	--admin-listen     EBB_ADMIN_LISTEN      :8022            /stats, /ready, /metrics
//	--drain-timeout    EBB_DRAIN_TIMEOUT     30s              longest drain after SIGTERM (and preStop wait)
//	--drain-delay      EBB_DRAIN_DELAY       5s               quiet period the preStop wait waits for
//	--header-timeout   EBB_HEADER_TIMEOUT    10s              a client must send a request head within this
//	--idle-timeout     EBB_IDLE_TIMEOUT      120s             idle keep-alive client connections close after this;
//	                                                          also bounds each read/write of a stalled body
//	--response-header-timeout EBB_RESPONSE_HEADER_TIMEOUT 10m  the app must start its response head within this
//	                                                          once a request is sent (504 after it; 0: no limit)
//	--max-header-bytes EBB_MAX_HEADER_BYTES  65536            larger request heads get 431
//	--app-readiness    EBB_APP_READINESS     (none)           the app's readiness probe as JSON (internal/readiness),
//	                                                          set by the webhook; none: ready when the port accepts
//	--counting         EBB_COUNTING          true             false turns counting off (benchmarks only)
//	--log-level        EBB_LOG_LEVEL         info             debug, info, warn or error
//	--log-format       EBB_LOG_FORMAT        json             json (clusters) or text (local)
//
// POD_NAME, POD_NAMESPACE and POD_IP (downward API) are added to every log line
// when set.
//
// # Counting
//
// A request is counted (total incremented, in-flight raised) as soon as its
// head is parsed and stays in flight until its response is fully written; an
// Upgrade (WebSocket) stays in flight until the tunnel closes; every h2c/gRPC
// stream is one request. Requests whose User-Agent starts with "kube-probe/"
// are proxied but not counted. The admin port serves the counters as one line
// in the ebb1 format of package internal/stats ("ebb1 <inFlight> <total>
// <bootID>\n", GET /stats), readiness (GET /ready: 200 once the app's own
// readiness check passes, which the sidecar runs every 100 ms while the app
// is not ready and again when asked; without one, once the app accepts TCP
// connections on its port; 503 before that, naming the check, and while
// draining) and Prometheus metrics (GET /metrics).
//
// # Proxying
//
// HTTP/1.1 is proxied by hand, by the strict engine and server of package
// internal/http1 (shared with ebb-activator; its package doc says what it
// refuses): the request head is parsed once into a per-connection buffer
// (hop-by-hop headers dropped, framing re-emitted from the parsed values,
// X-Forwarded-For appended; the Host is kept) and sent to the app over a
// pooled keep-alive connection; bodies (Content-Length, chunked with
// trailers, or until close) are copied piece by piece as they arrive, so
// streams such as SSE are flushed as they come and nothing is buffered
// whole. A request body streams in its own goroutine so that the app may
// answer while it still reads (full duplex). 1xx responses are forwarded;
// a 101 turns the connection into a byte tunnel. HTTP/1.0 requests are
// forwarded as HTTP/1.0 and close the connection afterwards. A connection
// that opens with the HTTP/2 preface is handed to net/http and each stream
// is proxied over h2c (gRPC keeps its trailers): h2c is forwarded as h2c,
// since clients speak it only to ports that declare HTTP/2.
//
// A pooled app connection found closed before any byte of a response is
// retried once on a fresh connection, for GET, HEAD, OPTIONS and TRACE
// requests without a streamed body (net/http's rule), and for any request
// whose head could not be written at all; every pooled connection is checked
// with a non-blocking peek before reuse. A client that goes away while its
// request waits on the app ends the request (and its count).
//
// Refused requests get a short text body and a closed connection (431, 400,
// 501, 505, 405: see internal/http1). When the app does not answer, or
// answers garbage, the client gets 502 "ebb-sidecar: the app is not
// answering on its port (<upstream>): <reason>"; 504 when no response head
// came within --response-header-timeout.
//
// # Drain
//
// The webhook gives the app container a preStop hook, GET /wait-for-drain on
// the admin port, so that a terminating pod keeps serving until every
// Service consumer (kube-proxy and the like) has moved away from it: the
// sidecar stays ready, answers every response with "Connection: close" and
// sends h2c connections a GOAWAY, so clients reconnect through the Service
// (new h2c connections are still served), and answers the hook
// (200) once nothing is in flight and no request has arrived for
// --drain-delay, or 503 at --drain-timeout. Only then does the kubelet stop
// the app, and the sidecar after it (native sidecars stop last).
//
// When Run's context is cancelled (SIGTERM in ebb-sidecar) the sidecar turns
// not-ready, keeps accepting and serving, answers with "Connection: close",
// and stops once nothing is in flight or the drain timeout has passed; only
// then are remaining connections closed.
package sidecar
