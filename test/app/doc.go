// Command ebb-test-app is the app every ebb test and benchmark runs behind
// the sidecar and the activator: HTTP/1.1 and h2c on one port, a small
// hello page (the benchmark's "direct" baseline), SSE, WebSocket echo, a
// streaming body echo, and gRPC (grpc.health.v1, with a trailer echo).
//
// Options (flag, then env, then default): --listen/LISTEN (:8080),
// --startup-delay/STARTUP_DELAY (0; wait before binding the port),
// --delay/DELAY (0; added to every request), --ready-after/READY_AFTER (0; the ready path answers 503 that long after the port is bound, and responses say X-App-Ready); the ready path's responses say X-App-Started (when the process began), --ready-path/READY_PATH
// (/healthz). Paths: / (?delay=100ms), /sse?n=5&interval=50ms, /ws
// (?silent=1: upgrade, then never send a byte nor answer one), /echo,
// /headers, /inflight (the requests in flight now, the most at once and the
// total, the ready path and itself not counted; with
// --in-flight-headers/IN_FLIGHT_HEADERS=true every other response says
// X-App-In-Flight on arrival and X-App-Max-In-Flight), /chain (the pod's
// name, then, with --downstream/DOWNSTREAM=<base URL>, that app's /chain
// answer: one line per hop of a chain of apps; 502 naming the downstream
// and why when it fails). gRPC: Health.Check with metadata "ebb-echo: v" answers with
// trailer "ebb-echo: v". SIGTERM shuts down gracefully.
package main
