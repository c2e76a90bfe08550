// Command demo is what `make demo` runs: it brings up the local cluster
// (real kube-apiserver, etcd, kube-controller-manager, kube-scheduler,
// kube-proxy, CoreDNS, the KEDA operator and metrics adapter, and a kubelet
// with containerd running ebb's images from a local registry), installs ebb from
// charts/ebb with helm, deploys a sample app at zero replicas with a KEDA
// ScaledObject, and narrates what a user sees: the app at zero, requests
// held by the activator, the app woken and serving them, then idle and back
// to zero; it ends with a summary table and tears everything down. With
// --keep it leaves the cluster running and prints how to reach it with
// kubectl.
package main
