package cluster

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
)

// The cluster's address plan. Both blocks are RFC 2544's benchmarking range,
// which no real network routes.
const (
	BridgeName  = "ebb0"
	BridgeIP    = "198.18.0.1" // the node's InternalIP and the API server's address
	PodCIDR     = "198.18.0.0/16"
	ServiceCIDR = "198.19.0.0/16"
	// KubernetesServiceIP is the first address of ServiceCIDR, which the API
	// server gives the default/kubernetes Service.
	KubernetesServiceIP = "198.19.0.1"
	// APIServerPort is the API server's secure port on BridgeIP.
	APIServerPort = 6443
)

// PartitionTable is the nftables table (inet family) in which a test cuts
// the network between pods; removed with cluster 0's network, so a test
// killed by its timeout leaves no rules naming pod IPs a later cluster
// reuses.
const PartitionTable = "ebb-test-partition"

// sweptTables are the nftables tables removed with cluster 0's network:
// kube-proxy's (nftables mode) and PartitionTable.
var sweptTables = [][2]string{{"ip", "kube-proxy"}, {"ip6", "kube-proxy"}, {"inet", PartitionTable}}

const ipForwardPath = "/proc/sys/net/ipv4/ip_forward"

// setupNetwork makes the cluster's pod bridge and routes its Service range
// to it before anything starts, so a request to a ClusterIP that
// kube-proxy has not programmed yet stays on this machine, and turns on
// ip_forward (the host's saved first by saveSysctls). Cluster 0's bridge is
// the host's; another cluster's is in its network namespace, which a veth
// pair joins to the host, with the host routing the cluster's ranges to it
// and the namespace routing everything else to the host.
// removeNetwork undoes it.
func setupNetwork(p plan) error {
	var steps [][]string
	in := func(args ...string) []string { return append([]string{"ip", "-n", p.netns}, args...) }
	if p.netns == "" {
		steps = [][]string{
			{"ip", "link", "add", BridgeName, "type", "bridge"},
			{"ip", "addr", "add", fmt.Sprintf("%s/%d", p.bridgeIP, p.bridgePrefix()), "dev", BridgeName},
			{"ip", "link", "set", BridgeName, "up"},
			{"ip", "route", "add", p.serviceCIDR, "dev", BridgeName},
		}
	} else {
		steps = [][]string{
			{"ip", "netns", "add", p.netns},
			{"ip", "link", "add", p.hostLink, "type", "veth", "peer", "name", "eth0", "netns", p.netns},
			{"ip", "addr", "add", p.hostIP + "/30", "dev", p.hostLink},
			{"ip", "link", "set", p.hostLink, "up"},
			in("link", "set", "lo", "up"),
			in("addr", "add", p.nodeLinkIP+"/30", "dev", "eth0"),
			in("link", "set", "eth0", "up"),
			in("link", "add", BridgeName, "type", "bridge"),
			in("addr", "add", fmt.Sprintf("%s/%d", p.bridgeIP, p.bridgePrefix()), "dev", BridgeName),
			in("link", "set", BridgeName, "up"),
			in("route", "add", p.serviceCIDR, "dev", BridgeName),
			in("route", "add", "default", "via", p.hostIP),
			{"ip", "route", "add", p.podCIDR, "via", p.nodeLinkIP},
			{"ip", "route", "add", p.serviceCIDR, "via", p.nodeLinkIP},
			{"ip", "netns", "exec", p.netns, "sh", "-c", "echo 1 > " + ipForwardPath},
		}
	}
	for _, s := range steps {
		if err := run(s[0], s[1:]...); err != nil {
			removeNetwork(p)
			return err
		}
	}
	if err := os.WriteFile(ipForwardPath, []byte("1\n"), 0o644); err != nil {
		removeNetwork(p)
		return fmt.Errorf("enable ip_forward: %w", err)
	}
	return nil
}

// removeNetwork deletes what setupNetwork and the cluster's kube-proxy
// made: the host's bridge and kube-proxy's tables for cluster 0, the
// namespace (with its bridge, tables and pods' links) and the veth pair
// for another. It ignores what is already gone.
func removeNetwork(p plan) {
	if p.netns == "" {
		_ = run("ip", "link", "del", BridgeName)
		for _, t := range sweptTables {
			_ = run("nft", "delete", "table", t[0], t[1])
		}
		return
	}
	_ = run("ip", "link", "del", p.hostLink)
	_ = run("ip", "netns", "del", p.netns)
}

// run executes a system command and returns its output in the error.
func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// MachineLock serialises runs of local clusters on one machine: they share
// the bridge, the address plan, kube-proxy's tables and the node's state
// directories. A run of several clusters (StartSeveral) holds it once.
type MachineLock struct{ f *os.File }

const lockPath = "/run/ebb-local-cluster.lock"

// LockMachine takes the machine lock, waiting for another cluster to stop.
// Start takes it itself unless Options.MachineLocked says the caller (or a
// parent process) holds it.
func LockMachine(logf func(string, ...any)) (*MachineLock, error) {
	f, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", lockPath, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		logf("another local cluster runs on this machine; waiting for it to stop")
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", lockPath, err)
		}
	}
	return &MachineLock{f: f}, nil
}

// Unlock releases the lock.
func (l *MachineLock) Unlock() {
	_ = syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
	l.f.Close()
}
