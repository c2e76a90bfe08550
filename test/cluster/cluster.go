package cluster

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ebb-dev/ebb/test/repo"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// NodeName is the one node of the local cluster.
const NodeName = "ebb-node"

// Options choose what Start runs besides the control plane.
type Options struct {
	// KEDA starts the KEDA operator (bin/keda-operator) with KEDA's CRDs.
	KEDA bool
	// KEDAMetricsAdapter also runs KEDA's metrics adapter
	// (bin/keda-adapter) as the cluster's external metrics API, so the HPAs
	// KEDA creates scale 1↔N. It implies KEDA.
	KEDAMetricsAdapter bool
	// Dir keeps the cluster's files (certificates, logs, etcd data); a new
	// temporary directory if empty. Logs stay there after Stop.
	Dir string
	// Logf receives progress lines; silent if nil.
	Logf func(format string, args ...any)
	// MachineLocked says the machine lock is held already (LockMachine),
	// by the caller or the parent process that started it.
	MachineLocked bool
	// Index numbers the cluster among several on this machine (0 to
	// MaxClusters-1); Several says there are several (StartSeveral sets
	// both). Cluster 0 alone has the whole address plan (network.go);
	// with several, each has a sub-range, and every cluster but 0 runs in
	// a network namespace of its own (plan.go).
	Index   int
	Several bool
	// AuditLog makes the API server write an audit log of every request at
	// the Metadata level (who, verb, resource, status; no bodies), one JSON
	// event per line at <Dir>/logs/audit.log (Cluster.AuditLogPath), with
	// the policy of auditPolicy.
	AuditLog bool
	// HPASyncPeriod is how often the controller manager syncs every HPA
	// (each sync reads its scale target and the external metrics); 2 s if
	// 0, which keeps tests short. A real cluster's is 15 s.
	HPASyncPeriod time.Duration
	// Traefik runs Traefik v3 (bin/traefik) on the node as the cluster's
	// ingress controller, with its Kubernetes Ingress and Gateway API
	// providers, after the Gateway API CRDs (bin/gateway-api-crds); see
	// traefik.go for what it is given.
	Traefik bool
	// Workers installs the tests' own Worker CRD (test/workers: a
	// PodSpecable kind with the scale subresource) and runs its controller
	// in this process until Stop (workers.go).
	Workers bool
}

// Cluster is a running local cluster. Build it with Start; Stop it always.
type Cluster struct {
	// Kubeconfig is the path of an admin kubeconfig for kubectl and helm.
	Kubeconfig string
	// RestConfig is an admin client configuration.
	RestConfig *rest.Config
	Client     kubernetes.Interface
	// Dir holds logs: <Dir>/logs/<program>.log and <Dir>/logs/pods/.
	Dir    string
	BinDir string
	// CAPEM is the cluster CA, trusted by the API server for client
	// certificates and by clients for the API server.
	CAPEM []byte
	// KEDACertDir holds ca.crt, tls.crt and tls.key signed by the cluster CA.
	KEDACertDir string
	// NodeIP is the node's address: its bridge's, the API server's and
	// CoreDNS's; PodCIDR and ServiceCIDR are the cluster's ranges.
	NodeIP, PodCIDR, ServiceCIDR string
	// Netns is the network namespace the cluster's programs run in ("":
	// the host's).
	Netns string
	// AuditLogPath is the API server's audit log (Options.AuditLog), ""
	// without one.
	AuditLogPath string
	// TraefikAddr is host:port of Traefik's web entrypoint (HTTP) on the
	// node's bridge, and TraefikMetricsURL its Prometheus endpoint
	// (Options.Traefik); "" without Traefik. TraefikGateway and
	// TraefikIngressClass name what routes attach to.
	TraefikAddr, TraefikMetricsURL string

	ca       *authority
	logf     func(string, ...any)
	procs    map[string]*process
	registry *imageRegistry
	lock     *MachineLock
	started  time.Time
	stopped  bool
	several  bool
	nextPort int // the next of freePorts' range in a network namespace

	plan     plan
	etcdURL  string
	etcdData string

	kedaMetricsService string
	stopWorkers        func() // Options.Workers
	// resolvConf makes the programs that run on the node outside any pod
	// resolve Service names through the cluster DNS (startWithClusterDNS).
	resolvConf string
}

// Start brings the cluster up and returns once the API server answers, the
// node is Ready, kube-proxy has synced and (with Options.KEDA) KEDA is ready.
// It takes the machine-wide lock first, so concurrent callers queue.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	logf := opts.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	binDir, err := repo.Bin()
	if err != nil {
		return nil, err
	}
	want := []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy",
		"kubelet", "containerd", "containerd-shim-runc-v2", "coredns"}
	opts.KEDA = opts.KEDA || opts.KEDAMetricsAdapter
	if opts.KEDA {
		want = append(want, "keda-operator")
	}
	if opts.KEDAMetricsAdapter {
		want = append(want, "keda-adapter")
	}
	if opts.Traefik {
		want = append(want, "traefik", gatewayAPICRDs)
	}
	bins, err := binaries(binDir, want...)
	if err != nil {
		return nil, err
	}
	etcd, err := lookPath("etcd", "etcd-server")
	if err != nil {
		return nil, err
	}
	for _, tool := range [][2]string{{"nft", "nftables"}, {"ip", "iproute2"}, {"runc", "runc"}, {cniBinDir + "/bridge", "containernetworking-plugins"}} {
		if _, err := lookPath(tool[0], tool[1]); err != nil {
			return nil, err
		}
	}
	// The kubelet runs on cgroup v1 hierarchies here (failCgroupV1: false),
	// and clean-up finds pods' processes through them.
	if _, err := os.Stat("/sys/fs/cgroup/pids/cgroup.procs"); err != nil {
		return nil, errors.New("the local cluster needs cgroup v1 hierarchies (no /sys/fs/cgroup/pids), as on the project's machines; a cgroup v2-only machine is not supported yet")
	}
	var lock *MachineLock
	if !opts.MachineLocked {
		if lock, err = LockMachine(logf); err != nil {
			return nil, err
		}
	}
	if opts.Index < 0 || opts.Index >= MaxClusters || (opts.Index > 0 && !opts.Several) {
		return nil, fmt.Errorf("cluster index %d: want 0 to %d, and above 0 only with Several", opts.Index, MaxClusters-1)
	}
	p := planFor(opts.Index, opts.Several)
	c := &Cluster{BinDir: binDir, logf: logf, procs: map[string]*process{}, lock: lock, started: time.Now(), plan: p,
		NodeIP: p.bridgeIP, PodCIDR: p.podCIDR, ServiceCIDR: p.serviceCIDR, Netns: p.netns, several: opts.Several}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w%s", err, c.logTails())
			c.Stop()
		}
	}()
	// What a killed run left behind goes first: every cluster's, unless
	// this cluster starts beside cluster 0.
	if p.index == 0 {
		if err := RemoveLeftovers(); err != nil {
			return c, err
		}
		if err := saveSysctls(); err != nil {
			return c, err
		}
	} else {
		removeNodeLeftovers(p)
		removeNetwork(p)
	}

	c.Dir = opts.Dir
	if c.Dir == "" {
		if c.Dir, err = os.MkdirTemp("", "ebb-cluster-"); err != nil {
			return c, fmt.Errorf("cluster dir: %w", err)
		}
	}
	for _, d := range []string{"pki", "logs", "logs/pods", "node"} {
		if err := os.MkdirAll(filepath.Join(c.Dir, d), 0o755); err != nil {
			return c, fmt.Errorf("cluster dir: %w", err)
		}
	}
	if err := setupNetwork(p); err != nil {
		return c, err
	}
	registryIP := "127.0.0.1"
	if p.hostIP != "" {
		registryIP = p.hostIP // where the namespace's containerd reaches the host
	}
	if c.registry, err = startRegistry(ctx, filepath.Join(binDir, "images"), registryIP); err != nil {
		return c, err
	}
	logf("registry %s", c.registry)
	pki, err := c.writePKI()
	if err != nil {
		return c, err
	}
	if err := c.startEtcd(ctx, etcd); err != nil {
		return c, err
	}
	if opts.AuditLog {
		if err := c.writeAuditPolicy(); err != nil {
			return c, err
		}
	}
	if err := c.startAPIServer(ctx, bins["kube-apiserver"], pki); err != nil {
		return c, err
	}
	logf("api server ready after %s", time.Since(c.started).Round(time.Millisecond))
	var traefik <-chan traefikSetup
	if opts.Traefik {
		traefik = c.prepareTraefik(ctx)
	}

	if err := c.startControllerManager(bins["kube-controller-manager"], pki, opts.HPASyncPeriod); err != nil {
		return c, err
	}
	if err := c.startScheduler(bins["kube-scheduler"]); err != nil {
		return c, err
	}
	proxyHealth, err := c.startKubeProxy(bins["kube-proxy"])
	if err != nil {
		return c, err
	}
	if err := c.startDNS(ctx, bins["coredns"]); err != nil {
		return c, err
	}
	if err := c.startContainerd(ctx, bins["containerd"], c.registry.addr); err != nil {
		return c, err
	}
	kubeletHealth, err := c.startKubelet(bins["kubelet"])
	if err != nil {
		return c, err
	}
	var kedaHealth string
	if opts.KEDA {
		if kedaHealth, err = c.startKEDA(ctx, bins["keda-operator"]); err != nil {
			return c, err
		}
	}
	if err := c.waitReady(ctx, kubeletHealth, proxyHealth, kedaHealth); err != nil {
		return c, err
	}
	if opts.Traefik {
		if err := c.startTraefik(ctx, bins["traefik"], traefik); err != nil {
			return c, err
		}
	}
	if opts.KEDAMetricsAdapter {
		if err := c.startKEDAAdapter(ctx, bins["keda-adapter"]); err != nil {
			return c, err
		}
	}
	if opts.Workers {
		if err := c.startWorkers(); err != nil {
			return c, err
		}
	}
	logf("local cluster ready in %s (logs in %s)", time.Since(c.started).Round(time.Millisecond), filepath.Join(c.Dir, "logs"))
	return c, nil
}

type pkiPaths struct {
	ca, serverCert, serverKey, proxyCert, proxyKey, saPub, saKey string
	kubeletClientCert, kubeletClientKey                          string // the API server's, towards kubelets (logs, exec)
}

func (c *Cluster) writePKI() (pkiPaths, error) {
	var p pkiPaths
	ca, err := newAuthority()
	if err != nil {
		return p, err
	}
	c.ca, c.CAPEM = ca, ca.certPEM
	dir := filepath.Join(c.Dir, "pki")
	p.ca = filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(p.ca, ca.certPEM, 0o600); err != nil {
		return p, fmt.Errorf("write CA: %w", err)
	}
	server, err := ca.issue("kube-apiserver", nil, []string{
		c.plan.bridgeIP, c.plan.kubernetesServiceIP, "127.0.0.1", "localhost",
		"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local",
	}, x509.ExtKeyUsageServerAuth)
	if err != nil {
		return p, err
	}
	if p.serverCert, p.serverKey, err = server.write(dir, "apiserver"); err != nil {
		return p, err
	}
	proxy, err := ca.issue("front-proxy-client", nil, nil, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return p, err
	}
	if p.proxyCert, p.proxyKey, err = proxy.write(dir, "front-proxy-client"); err != nil {
		return p, err
	}
	kubeletClient, err := ca.issue("kube-apiserver-kubelet-client", []string{"system:masters"}, nil, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return p, err
	}
	if p.kubeletClientCert, p.kubeletClientKey, err = kubeletClient.write(dir, "apiserver-kubelet-client"); err != nil {
		return p, err
	}
	if p.saPub, p.saKey, err = writeServiceAccountKeys(dir); err != nil {
		return p, err
	}
	admin, err := ca.issue("ebb-admin", []string{"system:masters"}, nil, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return p, err
	}
	host := "https://" + net.JoinHostPort(c.plan.bridgeIP, strconv.Itoa(APIServerPort))
	c.RestConfig = &rest.Config{
		Host: host, QPS: 200, Burst: 400,
		TLSClientConfig: rest.TLSClientConfig{CAData: ca.certPEM, CertData: admin.certPEM, KeyData: admin.keyPEM},
	}
	if c.Client, err = kubernetes.NewForConfig(c.RestConfig); err != nil {
		return p, fmt.Errorf("admin client: %w", err)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["ebb-local"] = &clientcmdapi.Cluster{Server: host, CertificateAuthorityData: ca.certPEM}
	kc.AuthInfos["ebb-admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: admin.certPEM, ClientKeyData: admin.keyPEM}
	kc.Contexts["ebb-local"] = &clientcmdapi.Context{Cluster: "ebb-local", AuthInfo: "ebb-admin", Namespace: "default"}
	kc.CurrentContext = "ebb-local"
	c.Kubeconfig = filepath.Join(c.Dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, c.Kubeconfig); err != nil {
		return p, fmt.Errorf("write kubeconfig: %w", err)
	}
	return p, nil
}

// freePorts are n ports for the cluster's programs to listen on: on the
// host, ports free now below the kernel's ephemeral range; in a cluster's
// own network namespace, the next ports of a range below the ephemeral one,
// which nothing else there uses. Never a port of the ephemeral range: one
// picked as free there can be some program's outgoing connection by the
// time the cluster's program binds it (Traefik's metrics listener failed on
// that in make test, with the unit tests' envtest servers running beside).
func (c *Cluster) freePorts(n int) ([]int, error) {
	if c.plan.netns != "" {
		ports := make([]int, n)
		for i := range ports {
			ports[i] = 20000 + 1000*c.plan.index + c.nextPort
			c.nextPort++
		}
		return ports, nil
	}
	return freePorts(n)
}

// lowestEphemeralPort is the start of the kernel's ephemeral port range.
func lowestEphemeralPort() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 32768
	}
	low, err := strconv.Atoi(f[0])
	if err != nil || low <= 10000 {
		return 32768
	}
	return low
}

// freePorts picks n ports at random in [10000, the ephemeral range's
// start) that nothing listens on, on any address, now.
func freePorts(n int) ([]int, error) {
	const lowest = 10000
	high := lowestEphemeralPort()
	ports := make([]int, 0, n)
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for tries := 0; len(ports) < n; tries++ {
		if tries == 1000 {
			return nil, fmt.Errorf("no %d free ports in [%d, %d) after %d tries", n, lowest, high, tries)
		}
		port := lowest + rand.IntN(high-lowest)
		l, err := net.Listen("tcp", ":"+strconv.Itoa(port))
		if err != nil {
			continue
		}
		ls = append(ls, l)
		ports = append(ports, port)
	}
	return ports, nil
}

func (c *Cluster) start(name string, env []string, path string, args ...string) (*process, error) {
	if c.plan.netns != "" {
		// nsenter execs the program in the cluster's network namespace
		// and nothing else: the mount namespace stays the host's, which
		// the kubelet and containerd share.
		args = append([]string{"--net=/run/netns/" + c.plan.netns, "--", path}, args...)
		path = "nsenter"
	}
	p, err := startProcess(filepath.Join(c.Dir, "logs"), name, env, path, args...)
	if err != nil {
		return nil, err
	}
	c.procs[name] = p
	return p, nil
}

// startWithClusterDNS starts a program on the node that resolves cluster
// DNS names (<svc>.<ns>, <svc>.<ns>.svc, ...) as a pod does: in its own
// mount namespace, a resolv.conf naming the cluster DNS and its search
// path is bind-mounted over /etc/resolv.conf. The KEDA operator needs it to
// dial an external scaler's address such as ebb-scaler.ebb-system:9090.
func (c *Cluster) startWithClusterDNS(name string, env []string, path string, args ...string) (*process, error) {
	unshare, err := lookPath("unshare", "util-linux")
	if err != nil {
		return nil, err
	}
	argv := append([]string{"--mount", "--propagation", "private", "--", "/bin/sh", "-c",
		`mount --bind "$0" /etc/resolv.conf && exec "$@"`, c.resolvConf, path}, args...)
	return c.start(name, env, unshare, argv...)
}

func (c *Cluster) startEtcd(ctx context.Context, etcd string) error {
	ports, err := c.freePorts(2)
	if err != nil {
		return err
	}
	// etcd's data lives in memory: the cluster is thrown away with the test.
	data, err := os.MkdirTemp("/dev/shm", "ebb-etcd-")
	if err != nil {
		data = filepath.Join(c.Dir, "etcd")
	}
	c.etcdData = data
	local := c.plan.localIP
	client := fmt.Sprintf("http://%s:%d", local, ports[0])
	c.etcdURL = client
	p, err := c.start("etcd", []string{"ETCD_UNSUPPORTED_ARCH="}, etcd,
		"--data-dir", data, "--name", "ebb",
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", fmt.Sprintf("http://%s:%d", local, ports[1]),
		"--initial-advertise-peer-urls", fmt.Sprintf("http://%s:%d", local, ports[1]),
		"--initial-cluster", fmt.Sprintf("ebb=http://%s:%d", local, ports[1]),
		"--log-level", "warn",
	)
	if err != nil {
		return err
	}
	return c.poll(ctx, p, 20*time.Second, "etcd health", func() error { return httpOK(nil, client+"/health") })
}

func (c *Cluster) startAPIServer(ctx context.Context, bin string, pki pkiPaths) error {
	args := []string{
		"--etcd-servers", c.etcdURL,
		"--bind-address", c.plan.bridgeIP, "--advertise-address", c.plan.bridgeIP, "--secure-port", strconv.Itoa(APIServerPort),
		"--tls-cert-file", pki.serverCert, "--tls-private-key-file", pki.serverKey,
		"--client-ca-file", pki.ca,
		"--service-cluster-ip-range", c.plan.serviceCIDR,
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", pki.saPub, "--service-account-signing-key-file", pki.saKey,
		"--authorization-mode", "Node,RBAC",
		"--enable-admission-plugins", "MutatingAdmissionWebhook,ValidatingAdmissionWebhook,PodSecurity,NamespaceLifecycle,ServiceAccount",
		"--enable-aggregator-routing=true",
		"--requestheader-client-ca-file", pki.ca, "--requestheader-allowed-names", "front-proxy-client",
		"--requestheader-username-headers", "X-Remote-User", "--requestheader-group-headers", "X-Remote-Group",
		"--requestheader-extra-headers-prefix", "X-Remote-Extra-",
		"--proxy-client-cert-file", pki.proxyCert, "--proxy-client-key-file", pki.proxyKey,
		// kubectl logs and exec: the node by its address (its name is not
		// in any DNS here), with a certificate the kubelet's x509
		// authentication takes.
		"--kubelet-preferred-address-types", "InternalIP",
		"--kubelet-client-certificate", pki.kubeletClientCert, "--kubelet-client-key", pki.kubeletClientKey,
		"--allow-privileged=true", "--profiling=false",
		"--cert-dir", filepath.Join(c.Dir, "pki", "apiserver-generated"),
		"--v=1",
	}
	if c.AuditLogPath != "" {
		args = append(args, c.auditArgs()...)
	}
	p, err := c.start("kube-apiserver", nil, bin, args...)
	if err != nil {
		return err
	}
	return c.poll(ctx, p, 60*time.Second, "kube-apiserver /readyz", func() error {
		return c.Client.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).Error()
	})
}

func (c *Cluster) startControllerManager(bin string, pki pkiPaths, hpaSync time.Duration) error {
	if hpaSync == 0 {
		// A real cluster's HPA syncs every 15 s; 2 s keeps tests short.
		hpaSync = 2 * time.Second
	}
	_, err := c.start("kube-controller-manager", nil, bin,
		"--kubeconfig", c.Kubeconfig,
		"--controllers", "*,-serviceaccount-token",
		"--leader-elect=false", "--secure-port=0",
		"--use-service-account-credentials=false",
		"--cluster-cidr", c.plan.podCIDR, "--service-cluster-ip-range", c.plan.serviceCIDR,
		"--root-ca-file", pki.ca,
		"--service-account-private-key-file", pki.saKey,
		"--concurrent-deployment-syncs=10", "--concurrent-replicaset-syncs=10",
		"--horizontal-pod-autoscaler-sync-period="+hpaSync.String(),
		"--v=1",
	)
	return err
}

// startKubeProxy runs kube-proxy in nftables mode on the host. Service
// traffic is masqueraded to the node's address so that replies between pods
// on the same bridge come back through the host's connection tracking.
func (c *Cluster) startKubeProxy(bin string) (health string, err error) {
	ports, err := c.freePorts(2)
	if err != nil {
		return "", err
	}
	health = net.JoinHostPort(c.plan.localIP, strconv.Itoa(ports[1]))
	_, err = c.start("kube-proxy", nil, bin,
		"--kubeconfig", c.Kubeconfig,
		"--proxy-mode", "nftables",
		"--hostname-override", NodeName,
		"--cluster-cidr", c.plan.podCIDR,
		"--nodeport-addresses", c.plan.bridgeIP+"/32",
		"--masquerade-all",
		"--conntrack-max-per-core=0",
		"--metrics-bind-address", net.JoinHostPort(c.plan.localIP, strconv.Itoa(ports[0])),
		"--healthz-bind-address", health,
		"--v=1",
	)
	return health, err
}

// waitReady waits for the kubelet and its node, the default ServiceAccount
// (the controller manager works), kube-proxy's first sync and KEDA.
func (c *Cluster) waitReady(ctx context.Context, kubeletHealth, proxyHealth, kedaHealth string) error {
	checks := []struct {
		name string
		p    *process
		fn   func() error
	}{
		{"kubelet healthz", c.procs["kubelet"], kubeletHealthy(kubeletHealth)},
		{"node Ready", c.procs["kubelet"], func() error {
			n, err := c.Client.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					return nil
				}
			}
			return errors.New("not ready")
		}},
		{"default service account", c.procs["kube-controller-manager"], func() error {
			_, err := c.Client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
			return err
		}},
		{"kube-proxy healthz", c.procs["kube-proxy"], func() error { return httpOK(nil, "http://"+proxyHealth+"/healthz") }},
	}
	if kedaHealth != "" {
		checks = append(checks, struct {
			name string
			p    *process
			fn   func() error
		}{"keda-operator readyz", c.procs["keda-operator"], func() error { return httpOK(nil, "http://"+kedaHealth+"/readyz") }})
	}
	for _, ch := range checks {
		if err := c.poll(ctx, ch.p, 60*time.Second, ch.name, ch.fn); err != nil {
			return err
		}
	}
	return nil
}

// poll calls fn until it succeeds, the process p (if any) exits, or timeout.
func (c *Cluster) poll(ctx context.Context, p *process, timeout time.Duration, what string, fn func() error) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		if p != nil {
			if done, perr := p.exited(); done {
				return false, fmt.Errorf("%s exited: %v", p.name, perr)
			}
		}
		last = fn()
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("wait for %s: %w (last: %v)", what, err, last)
	}
	return nil
}

func httpOK(client *http.Client, url string) error {
	if client == nil {
		client = &http.Client{Timeout: 2 * time.Second}
	}
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return nil
}

// Stop ends every process and every pod's containers, removes what the
// node and the network made, and releases the machine lock. It is safe to
// call twice.
func (c *Cluster) Stop() {
	if c.stopped {
		return
	}
	c.stopped = true
	if c.stopWorkers != nil {
		c.stopWorkers()
	}
	// The kubelet first, so that it restarts no container; then the pods'
	// processes, which outlive containerd in their shims.
	for _, name := range []string{"traefik", "keda-adapter", "keda-operator", "kubelet"} {
		if p := c.procs[name]; p != nil {
			p.stop(5 * time.Second)
		}
	}
	killContainers(c.plan)
	for _, name := range []string{"containerd", "coredns", "kube-proxy", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"} {
		if p := c.procs[name]; p != nil {
			p.stop(5 * time.Second)
		}
	}
	if c.plan.index == 0 && !c.several {
		if err := RemoveLeftovers(); err != nil {
			c.logf("stop: %v", err)
		}
	} else {
		// Only this cluster's: another may still run beside it.
		removeNodeLeftovers(c.plan)
		removeNetwork(c.plan)
		if c.etcdData != "" {
			_ = os.RemoveAll(c.etcdData)
		}
		if c.plan.index == 0 {
			if err := restoreSysctls(); err != nil {
				c.logf("stop: %v", err)
			}
		}
		if left := nodeLeftovers(c.plan); len(left) > 0 {
			c.logf("stop: cluster %d left %s", c.plan.index, strings.Join(left, "; "))
		}
	}
	if c.registry != nil {
		c.registry.stop()
	}
	if c.lock != nil {
		c.lock.Unlock()
	}
}

// logTails is appended to start-up errors: the end of each program's log.
func (c *Cluster) logTails() string {
	var b strings.Builder
	for name, p := range c.procs {
		fmt.Fprintf(&b, "\n--- last lines of %s (%s):\n%s", name, p.logPath, p.tail(1500))
	}
	return b.String()
}

// PodSecurityRestricted are the labels of a namespace that enforces Pod
// Security "restricted" (the latest version of the profile).
func PodSecurityRestricted() map[string]string {
	return map[string]string{"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"}
}

// EnsureNamespace creates a namespace unless it exists.
func (c *Cluster) EnsureNamespace(ctx context.Context, name string, labels map[string]string) error {
	_, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", name, err)
	}
	return nil
}
