// Package cluster runs a real local Kubernetes control plane for ebb's tests
// and demo: etcd (Debian's etcd-server), kube-apiserver,
// kube-controller-manager and kube-proxy (nftables mode) built from
// k8s.io/kubernetes, optionally the KEDA operator built from its module, and
// ebb's own node agent (package nodeagent) that runs pods as local processes
// in their own network namespaces.
//
// Pods get addresses in 198.18.0.0/16 on a bridge, Services ClusterIPs in
// 198.19.0.0/16 (RFC 2544's benchmarking block: nothing leaves the machine).
// One cluster runs on a machine at a time (a file lock serialises test
// packages); Start removes what a killed run left behind and Stop removes
// everything Start made.
package cluster
