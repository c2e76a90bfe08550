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

// kubeProxyTables are the nftables tables kube-proxy creates in nftables mode.
var kubeProxyTables = [][2]string{{"ip", "kube-proxy"}, {"ip6", "kube-proxy"}}

const ipForwardPath = "/proc/sys/net/ipv4/ip_forward"

// setupHostNetwork makes the pod bridge and routes the Service range to it
// before anything starts, so a request to a ClusterIP that kube-proxy has not
// programmed yet stays on this machine, and turns on ip_forward (saved
// first by saveSysctls). removeHostNetwork undoes it.
func setupHostNetwork() error {
	steps := [][]string{
		{"ip", "link", "add", BridgeName, "type", "bridge"},
		{"ip", "addr", "add", BridgeIP + "/16", "dev", BridgeName},
		{"ip", "link", "set", BridgeName, "up"},
		{"ip", "route", "add", ServiceCIDR, "dev", BridgeName},
	}
	for _, s := range steps {
		if err := run(s[0], s[1:]...); err != nil {
			removeHostNetwork()
			return err
		}
	}
	if err := os.WriteFile(ipForwardPath, []byte("1\n"), 0o644); err != nil {
		removeHostNetwork()
		return fmt.Errorf("enable ip_forward: %w", err)
	}
	return nil
}

// removeHostNetwork deletes what any run of this package may have left: the
// bridge and kube-proxy's nftables tables. It ignores what is already gone.
func removeHostNetwork() {
	_ = run("ip", "link", "del", BridgeName)
	for _, t := range kubeProxyTables {
		_ = run("nft", "delete", "table", t[0], t[1])
	}
}

// run executes a system command and returns its output in the error.
func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// MachineLock serialises local clusters on one machine: they share the
// bridge, the address plan, kube-proxy's tables and the node's state
// directories.
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
