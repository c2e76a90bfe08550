// Command scaler benchmarks ebb-scaler against its targets: it
// serves thousands of simulated sidecars (real HTTP servers on loopback) in
// this process, runs the scaler in a child process (this same binary) so its
// CPU and memory can be read from /proc, and prints a markdown table.
//
//	go run ./test/bench/scaler [-sidecars 5000 -apps 1000 -measure 20s]
//
// With -smoke it runs every step with tiny sizes, in seconds, and fails
// unless the scaler read every sidecar without error: make test runs it so
// that the bench cannot stop working unseen.
package main
