// Package cluster runs a real local Kubernetes cluster for ebb's tests and
// demo: etcd (Debian's etcd-server), kube-apiserver,
// kube-controller-manager, kube-scheduler, kube-proxy (nftables mode) and
// the kubelet built from k8s.io/kubernetes, containerd v2 built from its
// module with Debian's runc and CNI plugins, CoreDNS built from its module,
// optionally the KEDA operator and metrics adapter built from theirs, and an
// OCI registry (go-containerregistry's, in this process) serving the images
// `make images` built.
//
// The control plane, CoreDNS and KEDA run as processes on the machine; the
// node is the kubelet, registered with a node identity, running pods from
// images. Pods get addresses in 198.18.0.0/16 on a bridge through the CNI
// bridge plugin, Services ClusterIPs in 198.19.0.0/16 (RFC 2544's
// benchmarking block: nothing leaves the machine).
// One cluster runs on a machine at a time (a file lock serialises test
// packages); Start removes what a killed run left behind (containers,
// shims, mounts, network namespaces, cgroups, nftables tables, the bridge)
// and Stop removes everything Start made.
package cluster
