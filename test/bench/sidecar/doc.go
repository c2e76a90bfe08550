// Command sidecar benchmarks ebb-sidecar against the test app on loopback and
// prints its figures as a markdown table: throughput through the
// sidecar (counting on and off), through nginx and through a plain
// httputil.ReverseProxy relative to the app served directly (c=64,
// keep-alive, small response), added latency at c=1 of the sidecar and of
// nginx (next to a bare TCP forwarder, the floor any proxy hop costs on the
// machine), RSS idle and holding 1,000 keep-alive connections of the sidecar
// and of nginx, and the stripped binary size. Two closing lines put the
// sidecar next to nginx: throughput ÷ direct and p50 added, each side by side.
// With -baseline <an earlier ebb-sidecar>, that build runs in the same
// throughput and latency rounds too (its ÷ nginx and p50 added beside this
// build's) and in pairs of its own (below).
//
// nginx is the peer: Debian's build (make debs installs nginx-light), its own
// process in the foreground with exactly one worker, a generated config in a
// temp dir (pid file, error log and temp paths there, access log off),
// upstream keep-alive to the app (keepalive 64, HTTP/1.1, Connection "") and
// proxy_buffering off, so that it streams as the sidecar does; its cap on
// requests per keep-alive connection is lifted, as the others have none. Its
// RSS is master + worker. It is stopped and its temp dir removed when the
// bench ends, on error too.
//
// Run it from the module root:
//
//	go run ./test/bench/sidecar [-duration 2s] [-rounds 9] [-pairs 12] [-pin split|none] [-rebuild] [-baseline <older ebb-sidecar>] [-smoke]
//
// It uses bin/ebb-sidecar and bin/ebb-test-app, building them if missing (or
// with -rebuild), nginx from PATH, and wrk as the load generator. With -pin
// split (the default) wrk runs on CPU 0 and every server (app, sidecar,
// nginx, baseline proxy) on CPU 1, as in a pod whose app and sidecar share
// one CPU; with -pin none everything shares every CPU.
//
// Shared machines are noisy, so every figure is a median of figures taken
// within one round, where the targets ran back to back: throughput ratios
// are per-round ratios, added latency per-round differences. The small
// differences get pairs of their own: the sidecar against counting off,
// against request metrics off, against a copy of its own binary (the A/A
// control) and, with -baseline, against an earlier build (A/B). A pair is
// four adjacent 1 s runs in the order ABBA (BAAB every other pair, the
// variants' order rotated every pair), so that a drift in the machine's
// load falls on both sides alike, after one uncounted run of each (B then
// A before ABBA), so that both have just served, and each side's runs
// follow one of its own and one of the other's.
// The A/A control runs the same build from another file by the same
// procedure as the A/B: its figure, ~0 when the procedure is fair, is the
// noise floor to read the A/B against. Each throughput ratio is also given
// CPU-normalised: the CPU seconds wrk, the app and the proxy used per
// request (from /proc and wrk's rusage), which does not depend on how much
// CPU a neighbour left over.
//
// With -smoke it runs every step with tiny sizes (-duration 1s -rounds 1
// -pairs 1 -hold 50, and bin/ebb-sidecar as its own baseline unless
// -baseline names one), in about half a minute, and fails if wrk saw an
// error: make test runs it so that the bench cannot stop working unseen.
package main
