// Package install puts ebb on the local cluster the way a user does, with
// bin/helm from charts/ebb, and builds what an app needs to be scaled by
// it: a Deployment of the test app opted in by labels, its Service and a
// KEDA ScaledObject naming the chart's scaler. The e2e tests and `make demo`
// share it.
package install
