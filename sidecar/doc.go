// Package sidecar is ebb-sidecar, the per-pod counting reverse proxy between
// an app's Service and the app container: the hot path of every request the
// app serves. It owns the proxy (HTTP/1.1 through internal/http1, h2c and
// gRPC through net/http), the counters the scaler reads, the admin port
// (/stats, /ready, /metrics, /wait-for-drain) and the drain on SIGTERM.
// Options: ebb-sidecar -h.
//
// Invariants:
//   - A request is in flight from its parsed head until its response is
//     fully written (an upgrade until its tunnel closes; an h2c stream is one
//     request), and counted once. Every request that reaches the data port
//     is counted: nothing a client sends (a kube-probe User-Agent, any
//     header) exempts it. Kubelet probes stay uncounted because the webhook
//     points the app container's probes at the app's own port, never at
//     this one. The only exceptions are the app's own static responses
//     (--static-responses, internal/staticanswer): a request an Always rule
//     matches is answered here and never reaches the app; one an AtZero
//     rule without header conditions matches reaches it uncounted (the
//     drain still waits for it) when it is a probe's: no body and no
//     upgrade (h2c: no body, no CONNECT). A path not in canonical form
//     (a ';' parameter included) matches no rule.
//   - With --concurrency N, at most N requests (a tunnel, an h2c stream
//     each one) are at the app at once, the rest wait first come first
//     served, counted in flight, up to --concurrency-queue (503 with
//     Retry-After past it); none set, the request path pays one nil check
//     for every route control.
//   - A request leaves the count when its client leaves: within a client
//     check (100 ms) of a FIN or reset while it waits on the app, whatever
//     the client pipelined behind it or the app left unread; a tunnel once
//     one side has closed its half and the other has been silent for the
//     engine's half-close timeout (5 s), at once on a reset.
//   - --request-timeout bounds an exchange from its head, queue included
//     (504 before the response head, both connections closed after it);
//     --stream-idle-timeout closes a tunnel or a streaming response silent
//     both ways (an h2c stream is reset).
//   - No connection waits unbounded on its client: a request head, or the
//     h2c preface and first frame, within --header-timeout of its first
//     byte; no request for --idle-timeout and the connection closes (h2c:
//     GOAWAY); an h2c client silent for --idle-timeout is sent a PING and
//     cut if it does not answer within --header-timeout, streams open or not.
//   - h2c requests reach the app as net/http's HTTP/2 server parsed them,
//     target and trailers included (FuzzDifferentialH2C); what the HTTP/1.1
//     engine refuses (a method that is not a token, a missing or malformed
//     Host, a malformed target) is refused on h2c too, with 400.
//   - Forwarding headers, both protocols: Forwarded, X-Forwarded-Host and
//     X-Forwarded-Proto pass as received; X-Forwarded-For gets the client's
//     address appended (internal/http1/forwarded.go).
//   - HTTP/1.1 framing sent to the app is re-emitted from what was parsed
//     (chunk sizes included); bodies are streamed, never buffered whole, in
//     both directions at once; a body the app ends by closing reaches an
//     HTTP/1.1 client chunked, so that a cut one shows.
//   - A pooled app connection is reused only after a clean response and a
//     non-blocking peek; a request is retried on a fresh connection only when
//     no response byte came and it is idempotent without a streamed body, or
//     its head was not written at all.
//   - /ready is 200 only once the app's own readiness check passes (or its
//     port accepts, without one) and never while draining.
//   - Draining keeps serving with "Connection: close" (GOAWAY for h2c) until
//     nothing is in flight and no request came for --drain-delay, or until
//     --drain-timeout; connections are closed only after that.
package sidecar
