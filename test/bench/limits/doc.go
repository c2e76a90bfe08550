// Command limits measures ebb-sidecar under the CPU and memory requests and
// limits the chart gives it (sidecar.resources in charts/ebb/values.yaml),
// enforced as the kubelet enforces them, next to the same sidecar with no
// requests or limits ("none"), with the chart's requests plus a CPU limit of
// 100m, 250m or 1000m, and the app served directly. Per configuration it prints the latency the
// sidecar adds at a fixed 500 requests/s (p50, p99; the max and errors) and
// what it does at its throughput limit (wrk -t1 -c64 --latency: requests/s,
// p50, p99), then whether the chart's default keeps the p99 added at 500 RPS
// within 2 ms and which CPU limits do not. A CPU limit is what made Knative's
// queue-proxy slow when CFS throttled it (serving#8057).
//
// Every sidecar runs, from its first instruction, in a cgroup of its own,
// ebb-bench-limits/<config> under the bench's own cgroup (next to it on
// cgroup v2), with the values the kubelet's cgroupfs driver writes for a
// container: on cgroup v1 cpu.shares = request milliCPU × 1024 / 1000 (at
// least 2), cpu.cfs_period_us 100000, cpu.cfs_quota_us = limit milliCPU ×
// 100 (-1 without a CPU limit) and memory.limit_in_bytes = the memory limit;
// on cgroup v2 cpu.weight, cpu.max and memory.max from the same numbers. A memory request sets
// nothing, as with the kubelet (MemoryQoS off). The cgroups are removed when
// the bench ends, on error and on SIGINT or SIGTERM too. It needs root.
//
// cpu.shares weighs a cgroup against its siblings only, and only when the
// CPU is contended. ebb-bench-limits weighs against the rest of the machine
// as the kubelet's kubepods cgroup does (CPUs × 1024), and under it each
// sidecar's cgroup is the only busy one, so the request shows in the table
// but the figures are the limits'. Go gives the sidecar GOMAXPROCS 2 under
// every limit here (it rounds a limit up, and never below 2), so two threads
// can spend a period's quota in half of it.
//
// The 500 RPS load is open-loop: requests leave on a fixed schedule whatever
// the answers, over a pool of keep-alive connections, and each latency is
// taken from the request's scheduled send time, so the queueing behind a
// throttled sidecar is counted rather than hidden (no coordinated omission).
// Within a round the targets take turns in 0.5 s slices of their open-loop
// time, so that a burst of other work on a shared machine falls on all of
// them alike; then each runs wrk once. Added latency is a configuration's
// p50 or p99 minus the direct one of the same round; each figure is the
// median over rounds, the order of the targets rotated every round, and the
// max is the largest of all. The default is many short rounds rather than a
// few long ones: a burst of other work spoils one round's p99, and the
// median of five survives two such rounds. Next to the latencies: the
// sidecar's CPU (the run time of its threads, in millicores, averaged over
// the runs), the share of its cgroup's CFS periods that ran out of quota,
// and its cgroup's memory peak (what it charged, to set against the memory
// limit).
//
// Run it from the module root, as root, after make build (it uses
// bin/ebb-sidecar, bin/ebb-test-app and wrk):
//
//	go run ./test/bench/limits [-duration 2s] [-wrk-duration 3s] [-rounds 5] [-rate 500]
//
// With -smoke it runs every step once with tiny sizes, in seconds, and
// fails if a request failed: make test runs it so that the bench cannot
// stop working unseen.
package main
