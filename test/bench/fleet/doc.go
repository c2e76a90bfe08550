// Command fleet measures what a fleet of apps at zero costs ebb, KEDA and
// the API server, on the local cluster (test/cluster: the real node stack,
// the KEDA operator and metrics adapter, the API server's audit log, the
// controller manager's HPA sync at its upstream 15 s) with ebb installed by
// its chart with default values as the e2e suite installs it.
//
//	go run ./test/bench/fleet [-n 10,100,1000] [-idle 10m]
//
// Beside 20 warm apps (one pod each, a request every 100 ms to each
// through its Service) and one idle app with a pod, it creates apps at zero
// across 20 namespaces, each the README's complete example, cumulatively
// (10, then 90 more, then 900 more), and for each N prints a markdown
// table: how long after the last apply every AppRoute was routed
// (Ready, Admitted, Propagated and ScaledByKEDA True) and Idle; over the
// idle window, the CPU (cores, averaged) and RSS of each ebb component,
// KEDA's operator and metrics adapter and the API server, the API requests
// and writes per second of each client (from the audit log), and the
// Prometheus series each component and one idle sidecar export; then ebb's
// part of the cold start (status.lastColdStart) and the client's total for
// apps woken one at a time and together. The ratios between the N's
// follow. With -smoke it runs every step with 3 apps and a 20 s window, in
// about a minute, and fails if a wake fails: make bench-smoke runs it.
//
// It takes the machine's cluster lock; the default run takes about 55
// minutes on a 2-core machine.
package main
