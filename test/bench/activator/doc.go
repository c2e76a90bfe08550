// Command activator benchmarks the activator's data path and prints the
// figures as a markdown table, side by side in one run:
//
//   - warm forwarding through the activator ÷ the app served directly
//     (wrk, c=64, keep-alive, small response), target ≥ 0.40;
//   - a real sidecar turning ready → the first held request answered
//     (the activator finds out by probing the sidecar's /ready), p99 ≤ 50 ms;
//   - activator RSS while it holds 10,000 requests at once, ≤ 100 MiB;
//   - first held request → wake signal delivered to a real holdpush server
//     (the scaler's side of internal/holdpush), p99 ≤ 20 ms;
//   - memory per held request (RSS growth ÷ requests held, at 10,000);
//   - 5,000 held requests released at once (their app's /ready turns
//     200) → each answered, p50 and p99.
//
// With -baseline, the held-request figures of an earlier build are taken
// in the same run, both activators running side by side against the same
// app (each with its own holdpush server), every step taking each build in
// turn in alternating order, and printed beside this build's with the
// ratio this ÷ baseline. The baseline is this program built from the
// earlier commit (its child mode is that build's activator):
//
//	git worktree add /tmp/base <commit>
//	(cd /tmp/base && go build -o /tmp/activator-bench-base ./test/bench/activator)
//	go run ./test/bench/activator -baseline /tmp/activator-bench-base
//
// The activator runs as its own process (this program re-executed in child
// mode): the real Router of package activator, with its routing table and
// endpoints set from a file instead of informers, so its RSS excludes the
// client-go caches of a cluster deployment.
//
// Run it from the module root (uses bin/ebb-sidecar and bin/ebb-test-app,
// building them if missing, and wrk):
//
//	go run ./test/bench/activator [-duration 5s] [-rounds 3] [-trials 30] [-wakes 200] [-hold 10000] [-release 5000] [-baseline bin]
//
// With -smoke it runs every step with tiny sizes, in seconds: make test
// runs it so that the bench cannot stop working unseen.
package main
