package cluster

import (
	"fmt"
	"net/netip"
)

// MaxClusters is how many local clusters one machine runs at once
// (Options.Index 0 to MaxClusters-1).
const MaxClusters = 3

// plan is one cluster's share of the machine: its addresses, where its
// node side runs, and the node's state paths. Cluster 0 runs on the host's
// network; every other cluster's programs (control plane and node alike)
// run in a network namespace of their own, as kind runs a node in a
// container, so that its kube-proxy's nftables tables, bridge and pods are
// its own. The host reaches each namespace over a veth pair with a route
// to its pod and Service ranges.
type plan struct {
	index int
	// netns is the network namespace of the cluster's programs; "" for
	// the host's.
	netns string
	// bridgeIP is the node's address on its pod bridge: the API server's,
	// the kubelet's, CoreDNS's.
	bridgeIP            string
	podCIDR             string
	serviceCIDR         string
	kubernetesServiceIP string
	// localIP is where the cluster's programs serve what the test
	// process checks (health ports): loopback on the host, the bridge
	// address in a namespace.
	localIP string
	// hostIP is the host's address as the namespace reaches it (the veth's
	// host end; the image registry listens there); nodeLinkIP the
	// namespace's end. Both "" for cluster 0.
	hostIP, nodeLinkIP string
	hostLink           string // the veth's host-side name

	containerdRoot, containerdState, kubeletRoot, cniState string
	// cgroupRoot is the cgroup under which the kubelet puts every pod
	// (<controller>/<root>/kubepods/...).
	cgroupRoot string
}

func (p plan) containerdSock() string { return p.containerdState + "/containerd.sock" }

// planFor is cluster index's plan. Alone, cluster 0 has the whole
// 198.18.0.0/16 for pods and 198.19.0.0/16 for Services. With several,
// cluster i has pods in 198.18.64i.0/18 and Services in 198.19.64i.0/18,
// and the veth pairs live in 198.18.255.0/24 (4i+1 the host's end, 4i+2
// the namespace's), outside every cluster's ranges.
func planFor(index int, several bool) plan {
	p := plan{
		index:               index,
		bridgeIP:            BridgeIP,
		podCIDR:             PodCIDR,
		serviceCIDR:         ServiceCIDR,
		kubernetesServiceIP: KubernetesServiceIP,
		localIP:             "127.0.0.1",
		containerdRoot:      "/var/lib/ebb-containerd",
		containerdState:     "/run/ebb-containerd",
		kubeletRoot:         "/var/lib/ebb-kubelet",
		cniState:            "/run/ebb-cni",
		cgroupRoot:          "/ebb",
	}
	if several {
		third := 64 * index
		p.bridgeIP = fmt.Sprintf("198.18.%d.1", third)
		p.podCIDR = fmt.Sprintf("198.18.%d.0/18", third)
		p.serviceCIDR = fmt.Sprintf("198.19.%d.0/18", third)
		p.kubernetesServiceIP = fmt.Sprintf("198.19.%d.1", third)
	}
	if index > 0 {
		suffix := fmt.Sprintf("-c%d", index)
		p.netns = "ebb" + suffix
		p.localIP = p.bridgeIP
		p.hostIP = fmt.Sprintf("198.18.255.%d", 4*index+1)
		p.nodeLinkIP = fmt.Sprintf("198.18.255.%d", 4*index+2)
		p.hostLink = fmt.Sprintf("ebbv%d", index)
		p.containerdRoot += suffix
		p.containerdState += suffix
		p.kubeletRoot += suffix
		p.cniState += suffix
		p.cgroupRoot += suffix
	}
	return p
}

// allPlans are every cluster's plan, for the clean-up of what any run
// left (the paths do not depend on several).
func allPlans() []plan {
	ps := make([]plan, MaxClusters)
	for i := range ps {
		ps[i] = planFor(i, true)
	}
	return ps
}

// bridgePrefix is the prefix length of the bridge's address: the pod
// range's.
func (p plan) bridgePrefix() int {
	return netip.MustParsePrefix(p.podCIDR).Bits()
}
