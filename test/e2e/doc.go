// Package e2e proves ebb the way a user runs it: installed from charts/ebb
// with helm into the local cluster (real kube-apiserver, etcd,
// kube-controller-manager, kube-scheduler, kube-proxy, CoreDNS, KEDA
// operator and metrics adapter, and a real kubelet running ebb's own
// images through containerd), an app opted in by a namespace label, a KEDA
// ScaledObject naming the chart's scaler, and real HTTP traffic to the app
// Service's ClusterIP.
//
// The release's namespace and every app namespace enforce Pod Security
// "restricted": ebb's containers and the injected sidecar run as uid 65532
// with a read-only root filesystem, no capabilities, and the chart's CPU and
// memory limits in their cgroups.
package e2e
