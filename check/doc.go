// Package check is ebb-check, the program behind the chart's `helm test`:
// it proves an installed ebb works from inside the cluster. The webhook is
// reachable by the API server (the test app's pod was admitted with the
// sidecar injected), a request through the test app's Service passes the
// sidecar (its count goes up), the scaler answers gRPC health (over TLS
// with a client certificate when the scaler requires one), and the
// activator answers its readiness check. Each check prints one line; the
// first that fails ends the run with what failed and why.
package check
