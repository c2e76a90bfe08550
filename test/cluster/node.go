package cluster

import (
	"context"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Where the node's programs keep their state is the cluster's plan: fixed
// paths per cluster index, not under the cluster's directory, so that the
// clean-up of a killed run finds them (leftovers.go); the machine lock
// makes them one run's at a time.
const (
	// cniNetwork names the pod network: its bridge plugin attaches pods to
	// BridgeName, host-local hands out PodCIDR.
	cniNetwork = "ebb"
	// DNSAddress is where cluster 0's CoreDNS answers: the node's bridge
	// address, which every pod has as its nameserver (as NodeLocal
	// DNSCache puts one on every node). Cluster.NodeIP is any cluster's.
	DNSAddress = BridgeIP
	// ClusterDomain is the DNS suffix of Services.
	ClusterDomain = "cluster.local"
)

// PauseImage is the pod sandbox image, built by `make images` from
// test/pause and served by the cluster's registry.
const PauseImage = "ghcr.io/ebb-dev/ebb-pause:dev"

// cniBinDir is where Debian's containernetworking-plugins installs them.
const cniBinDir = "/usr/lib/cni"

// startContainerd writes containerd's configuration (the CRI plugin with
// runc, the CNI network on the bridge, pulls of ghcr.io from the cluster's
// registry) and runs it.
func (c *Cluster) startContainerd(ctx context.Context, bin, registry string) error {
	dir := filepath.Join(c.Dir, "node")
	certs := filepath.Join(dir, "certs.d")
	cni := filepath.Join(dir, "cni")
	for _, d := range []string{filepath.Join(certs, "ghcr.io"), cni} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("containerd config: %w", err)
		}
	}
	// The chart's image names stay as released; containerd fetches them from
	// the local registry, and never from ghcr.io: an image missing there
	// fails to pull at once instead of leaving the machine.
	local := "http://" + registry
	hosts := fmt.Sprintf("server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", local, local)
	if err := os.WriteFile(filepath.Join(certs, "ghcr.io", "hosts.toml"), []byte(hosts), 0o644); err != nil {
		return fmt.Errorf("containerd config: %w", err)
	}
	conflist := fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": %q,
  "plugins": [{
    "type": "bridge", "bridge": %q, "isGateway": true, "ipMasq": false, "hairpinMode": true,
    "ipam": {"type": "host-local", "dataDir": %q, "ranges": [[{"subnet": %q, "gateway": %q}]], "routes": [{"dst": "0.0.0.0/0"}]}
  }]
}
`, cniNetwork, BridgeName, filepath.Join(c.plan.cniState, "networks"), c.plan.podCIDR, c.plan.bridgeIP)
	if err := os.WriteFile(filepath.Join(cni, "10-ebb.conflist"), []byte(conflist), 0o644); err != nil {
		return fmt.Errorf("containerd config: %w", err)
	}
	runc, err := lookPath("runc", "runc")
	if err != nil {
		return err
	}
	// oom_score and restrict_oom_score_adj: this machine's root has no
	// CAP_SYS_RESOURCE, so nothing may lower an OOM score.
	config := fmt.Sprintf(`version = 3
root = %q
state = %q
oom_score = 0

[grpc]
  address = %q

[ttrpc]
  address = %q

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = %q
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = %q

[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = [%q]
    conf_dir = %q
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      BinaryName = %q
      Root = %q
`, c.plan.containerdRoot, c.plan.containerdState, c.plan.containerdSock(), c.plan.containerdSock()+".ttrpc", PauseImage, certs, cniBinDir, cni, runc,
		filepath.Join(c.plan.containerdState, "runc"))
	path := filepath.Join(dir, "containerd.toml")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		return fmt.Errorf("containerd config: %w", err)
	}
	// The shim is found on PATH, next to containerd in bin/.
	env := []string{"PATH=" + filepath.Dir(bin) + ":" + os.Getenv("PATH")}
	p, err := c.start("containerd", env, bin, "--config", path, "--log-level", "warn")
	if err != nil {
		return err
	}
	return c.poll(ctx, p, 20*time.Second, "containerd socket", func() error {
		conn, err := net.Dial("unix", c.plan.containerdSock())
		if err == nil {
			conn.Close()
		}
		return err
	})
}

// startKubelet registers the node with the API server under a node
// identity (system:node:<name> in system:nodes, as kubeadm's clusters do)
// and runs its pods through containerd. It returns the kubelet's health
// address.
func (c *Cluster) startKubelet(bin string) (string, error) {
	dir := filepath.Join(c.Dir, "node")
	pair, err := c.ca.issue("system:node:"+NodeName, []string{"system:nodes"}, nil, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return "", err
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["ebb-local"] = &clientcmdapi.Cluster{Server: c.RestConfig.Host, CertificateAuthorityData: c.CAPEM}
	kc.AuthInfos["kubelet"] = &clientcmdapi.AuthInfo{ClientCertificateData: pair.certPEM, ClientKeyData: pair.keyPEM}
	kc.Contexts["kubelet"] = &clientcmdapi.Context{Cluster: "ebb-local", AuthInfo: "kubelet"}
	kc.CurrentContext = "kubelet"
	kubeconfig := filepath.Join(dir, "kubelet.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		return "", fmt.Errorf("kubelet kubeconfig: %w", err)
	}
	ports, err := c.freePorts(2)
	if err != nil {
		return "", err
	}
	health := net.JoinHostPort(c.plan.localIP, strconv.Itoa(ports[1]))
	podLogs := filepath.Join(c.Dir, "logs", "pods")
	// Pods with dnsPolicy Default get this file; ClusterFirst pods get the
	// cluster's DNS and search path from clusterDNS and clusterDomain.
	resolv := filepath.Join(dir, "resolv.conf")
	if err := os.WriteFile(resolv, []byte("nameserver "+c.plan.bridgeIP+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("kubelet resolv.conf: %w", err)
	}
	// What this machine needs: cgroups v1 (failCgroupV1: false) with the
	// cgroupfs driver, no KUBE-FIREWALL chain through iptables
	// (makeIPTablesUtilChains: false), eviction thresholds low enough for a
	// shared disk. Probes run as they do anywhere.
	config := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
cgroupRoot: %q
failCgroupV1: false
failSwapOn: false
makeIPTablesUtilChains: false
containerRuntimeEndpoint: unix://%s
address: %q
port: %d
readOnlyPort: 0
healthzBindAddress: %q
healthzPort: %d
clusterDNS: [%q]
clusterDomain: %q
resolvConf: %q
podLogsDir: %q
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 100Mi
  nodefs.available: "1%%"
  nodefs.inodesFree: "1%%"
  imagefs.available: "1%%"
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: %q}
authorization:
  mode: AlwaysAllow
`, c.plan.cgroupRoot, c.plan.containerdSock(), c.plan.bridgeIP, ports[0], c.plan.localIP, ports[1], c.plan.bridgeIP, ClusterDomain, resolv, podLogs,
		filepath.Join(c.Dir, "pki", "ca.crt"))
	path := filepath.Join(dir, "kubelet.yaml")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		return "", fmt.Errorf("kubelet config: %w", err)
	}
	if err := makeCgroupRoot(c.plan); err != nil {
		return "", err
	}
	_, err = c.start("kubelet", nil, bin,
		"--config", path, "--kubeconfig", kubeconfig,
		"--hostname-override", NodeName, "--node-ip", c.plan.bridgeIP,
		"--root-dir", c.plan.kubeletRoot, "--cert-dir", filepath.Join(dir, "kubelet-pki"),
		"--v=1",
	)
	return health, err
}

// startScheduler runs kube-scheduler: it binds pods to the node.
func (c *Cluster) startScheduler(bin string) error {
	_, err := c.start("kube-scheduler", nil, bin,
		"--kubeconfig", c.Kubeconfig,
		"--authentication-kubeconfig", c.Kubeconfig, "--authorization-kubeconfig", c.Kubeconfig,
		"--leader-elect=false", "--secure-port=0",
		"--v=1",
	)
	return err
}

// startDNS runs CoreDNS on the node's bridge address with the kubernetes
// plugin: the cluster DNS of every pod and of the programs that run on the
// node (startWithClusterDNS).
func (c *Cluster) startDNS(ctx context.Context, bin string) error {
	ports, err := c.freePorts(2)
	if err != nil {
		return err
	}
	ready := net.JoinHostPort(c.plan.localIP, strconv.Itoa(ports[1]))
	// No forward plugin: names outside the cluster are not answered, so
	// nothing a test resolves leaves the machine.
	corefile := fmt.Sprintf(`.:53 {
    bind %s
    errors
    health %s:%d
    ready %s
    kubernetes %s in-addr.arpa ip6.arpa {
        kubeconfig %s ebb-local
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 0
    }
}
`, c.plan.bridgeIP, c.plan.localIP, ports[0], ready, ClusterDomain, c.Kubeconfig)
	dir := filepath.Join(c.Dir, "node")
	path := filepath.Join(dir, "Corefile")
	if err := os.WriteFile(path, []byte(corefile), 0o644); err != nil {
		return fmt.Errorf("corefile: %w", err)
	}
	c.resolvConf = filepath.Join(dir, "resolv-host.conf")
	resolv := fmt.Sprintf("nameserver %s\nsearch svc.%s %s\noptions ndots:5\n", c.plan.bridgeIP, ClusterDomain, ClusterDomain)
	if err := os.WriteFile(c.resolvConf, []byte(resolv), 0o644); err != nil {
		return fmt.Errorf("resolv.conf for the node's programs: %w", err)
	}
	p, err := c.start("coredns", nil, bin, "-conf", path)
	if err != nil {
		return err
	}
	return c.poll(ctx, p, 30*time.Second, "coredns ready", func() error { return httpOK(nil, "http://"+ready+"/ready") })
}

// kubeletHealthy is the kubelet's /healthz.
func kubeletHealthy(addr string) func() error {
	client := &http.Client{Timeout: 2 * time.Second}
	return func() error { return httpOK(client, "http://"+addr+"/healthz") }
}
