// Package e2e proves ebb the way a user runs it: installed from charts/ebb
// with helm into the local cluster (real kube-apiserver, etcd,
// kube-controller-manager, kube-proxy, KEDA operator and metrics adapter;
// ebb's components as the chart's own pods through the node agent), an app
// opted in by a namespace label, a KEDA ScaledObject naming the chart's
// scaler, and real HTTP traffic to the app Service's ClusterIP.
//
// The node agent runs every container as root and ignores securityContext,
// so the chart's restricted security settings are not exercised here (the
// chart tests check them against the API server's Pod Security admission).
package e2e
