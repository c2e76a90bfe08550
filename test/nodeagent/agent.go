package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// Config is what the agent needs to know about its node and cluster.
type Config struct {
	Client   kubernetes.Interface
	NodeName string
	// NodeIP is the bridge's address: the node's InternalIP and every pod's
	// default gateway.
	NodeIP  string
	Bridge  string
	PodCIDR netip.Prefix
	// KubernetesServiceHost is the ClusterIP of default/kubernetes, given to
	// every container as KUBERNETES_SERVICE_HOST.
	KubernetesServiceHost string
	// ClusterDomain is the DNS suffix of Service names; cluster.local if empty.
	ClusterDomain string
	BinDir        string // programs that images map to
	RunDir        string // per-pod volumes
	LogDir        string // container output: <ns>_<pod>_<container>.log
	// HostsFile, if set, is an existing file the agent keeps as a hosts
	// file naming every Service (rewritten in place, so a bind mount of it
	// over /etc/hosts follows): cluster DNS names for programs that run on
	// the node outside any pod, such as the KEDA operator.
	HostsFile string
	Log       logr.Logger
}

func (c *Config) validate() error {
	var errs []error
	if c.Client == nil {
		errs = append(errs, errors.New("client is required"))
	}
	for _, f := range [][2]string{{"node name", c.NodeName}, {"node IP", c.NodeIP}, {"bridge", c.Bridge}, {"bin dir", c.BinDir}, {"run dir", c.RunDir}, {"log dir", c.LogDir}} {
		if f[1] == "" {
			errs = append(errs, fmt.Errorf("%s is required", f[0]))
		}
	}
	if !c.PodCIDR.IsValid() {
		errs = append(errs, errors.New("pod CIDR is required"))
	}
	if c.ClusterDomain == "" {
		c.ClusterDomain = "cluster.local"
	}
	return errors.Join(errs...)
}

// Agent is one node. Build it with New and run it with Run.
type Agent struct {
	cfg Config
	ips *ipPool

	mu      sync.Mutex
	workers map[types.UID]*podWorker
	hosts   map[string][]byte // namespace → shared part of its pods' hosts files
	mounts  map[string]bool   // mount points created on the host
}

// New validates cfg and returns an agent that has not started.
func New(cfg Config) (*Agent, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("node agent config: %w", err)
	}
	for _, d := range []string{cfg.RunDir, cfg.LogDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("node agent: %w", err)
		}
	}
	return &Agent{cfg: cfg, ips: newIPPool(cfg.PodCIDR), workers: map[types.UID]*podWorker{}, mounts: map[string]bool{}}, nil
}

// Run registers the node and runs its pods until ctx ends, then stops every
// container and removes every sandbox it made.
func (a *Agent) Run(ctx context.Context) error {
	if err := a.registerNode(ctx); err != nil {
		return err
	}
	go a.heartbeat(ctx)

	factory := informers.NewSharedInformerFactory(a.cfg.Client, 10*time.Minute)
	pods := factory.Core().V1().Pods().Informer()
	services := factory.Core().V1().Services().Informer()
	if _, err := pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { a.podChanged(ctx, o) },
		UpdateFunc: func(_, o any) { a.podChanged(ctx, o) },
		DeleteFunc: a.podDeleted,
	}); err != nil {
		return fmt.Errorf("watch pods: %w", err)
	}
	if _, err := services.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { a.servicesChanged(services.GetStore()) },
		UpdateFunc: func(_, _ any) { a.servicesChanged(services.GetStore()) },
		DeleteFunc: func(any) { a.servicesChanged(services.GetStore()) },
	}); err != nil {
		return fmt.Errorf("watch services: %w", err)
	}
	factory.Start(ctx.Done())
	<-ctx.Done()
	factory.Shutdown()
	a.stopAll()
	return nil
}

func (a *Agent) registerNode(ctx context.Context) error {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: a.cfg.NodeName, Labels: map[string]string{
			"kubernetes.io/hostname": a.cfg.NodeName, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
		}},
		Spec: corev1.NodeSpec{PodCIDR: a.cfg.PodCIDR.String(), PodCIDRs: []string{a.cfg.PodCIDR.String()}},
	}
	created, err := a.cfg.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		created, err = a.cfg.Client.CoreV1().Nodes().Get(ctx, a.cfg.NodeName, metav1.GetOptions{})
	}
	if err != nil {
		return fmt.Errorf("register node %s: %w", a.cfg.NodeName, err)
	}
	created.Status = a.nodeStatus()
	if _, err := a.cfg.Client.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("node %s status: %w", a.cfg.NodeName, err)
	}
	return a.renewLease(ctx, created.UID)
}

func (a *Agent) nodeStatus() corev1.NodeStatus {
	now := metav1.Now()
	res := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("16"), corev1.ResourceMemory: resource.MustParse("64Gi"),
		corev1.ResourcePods: resource.MustParse("500"), corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
	}
	return corev1.NodeStatus{
		Capacity: res, Allocatable: res, Phase: corev1.NodeRunning,
		Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: a.cfg.NodeIP}, {Type: corev1.NodeHostName, Address: a.cfg.NodeName}},
		Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "ebb node agent is posting ready status", LastHeartbeatTime: now, LastTransitionTime: now},
			{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory", LastHeartbeatTime: now, LastTransitionTime: now},
			{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasNoDiskPressure", LastHeartbeatTime: now, LastTransitionTime: now},
			{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientPID", LastHeartbeatTime: now, LastTransitionTime: now},
		},
		NodeInfo:        corev1.NodeSystemInfo{KubeletVersion: "v1.36.4", OperatingSystem: "linux", Architecture: "amd64", ContainerRuntimeVersion: "ebb-nodeagent://1"},
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: 10250}},
	}
}

func (a *Agent) renewLease(ctx context.Context, nodeUID types.UID) error {
	leases := a.cfg.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	now := metav1.NewMicroTime(time.Now())
	l, err := leases.Get(ctx, a.cfg.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		l = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: a.cfg.NodeName, Namespace: corev1.NamespaceNodeLease, OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: a.cfg.NodeName, UID: nodeUID}}},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(a.cfg.NodeName), LeaseDurationSeconds: ptr.To(int32(40)), RenewTime: &now},
		}
		_, err = leases.Create(ctx, l, metav1.CreateOptions{})
	} else if err == nil {
		l.Spec.RenewTime = &now
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("renew lease of node %s: %w", a.cfg.NodeName, err)
	}
	return nil
}

// heartbeat renews the Lease and the Ready condition every 10 s, as the
// kubelet does, so the node lifecycle controller never taints the node.
func (a *Agent) heartbeat(ctx context.Context) {
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		node, err := a.cfg.Client.CoreV1().Nodes().Get(ctx, a.cfg.NodeName, metav1.GetOptions{})
		if err == nil {
			node.Status = a.nodeStatus()
			_, err = a.cfg.Client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
		}
		if err == nil {
			err = a.renewLease(ctx, node.UID)
		}
		if err != nil && ctx.Err() == nil {
			a.cfg.Log.Error(err, "node heartbeat")
		}
	}
}

func (a *Agent) podChanged(ctx context.Context, o any) {
	pod, ok := o.(*corev1.Pod)
	if !ok {
		return
	}
	if pod.Spec.NodeName == "" {
		if pod.DeletionTimestamp == nil && (pod.Spec.SchedulerName == "" || pod.Spec.SchedulerName == corev1.DefaultSchedulerName) {
			go a.bind(ctx, pod)
		}
		return
	}
	if pod.Spec.NodeName != a.cfg.NodeName {
		return
	}
	a.mu.Lock()
	w, ok := a.workers[pod.UID]
	if !ok {
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			a.mu.Unlock()
			return
		}
		w = newPodWorker(a, pod)
		a.workers[pod.UID] = w
		go w.run(ctx)
	}
	a.mu.Unlock()
	w.update(pod)
}

func (a *Agent) podDeleted(o any) {
	if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = t.Obj
	}
	pod, ok := o.(*corev1.Pod)
	if !ok {
		return
	}
	a.mu.Lock()
	w := a.workers[pod.UID]
	a.mu.Unlock()
	if w != nil {
		w.gone()
	}
}

func (a *Agent) workerDone(uid types.UID) {
	a.mu.Lock()
	delete(a.workers, uid)
	a.mu.Unlock()
}

// bind plays the scheduler: every pending pod goes to this node.
func (a *Agent) bind(ctx context.Context, pod *corev1.Pod) {
	b := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: a.cfg.NodeName},
	}
	err := a.cfg.Client.CoreV1().Pods(pod.Namespace).Bind(ctx, b, metav1.CreateOptions{})
	if err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) && ctx.Err() == nil {
		a.cfg.Log.Error(err, "bind pod", "pod", pod.Namespace+"/"+pod.Name)
	}
}

// servicesChanged rebuilds the name → ClusterIP lines of every namespace and
// rewrites the hosts file of every running pod.
func (a *Agent) servicesChanged(store cache.Store) {
	type entry struct{ name, ns, ip string }
	var entries []entry
	for _, o := range store.List() {
		svc := o.(*corev1.Service)
		if svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == corev1.ClusterIPNone {
			continue
		}
		entries = append(entries, entry{svc.Name, svc.Namespace, svc.Spec.ClusterIP})
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].ns+"/"+entries[i].name < entries[j].ns+"/"+entries[j].name })
	var all strings.Builder
	for _, e := range entries {
		fmt.Fprintf(&all, "%s\t%s.%s.svc.%s %s.%s.svc %s.%s\n", e.ip, e.name, e.ns, a.cfg.ClusterDomain, e.name, e.ns, e.name, e.ns)
	}
	hosts := map[string][]byte{}
	namespaces := map[string]bool{}
	for _, e := range entries {
		namespaces[e.ns] = true
	}
	for ns := range namespaces {
		var b strings.Builder
		b.WriteString(all.String())
		for _, e := range entries {
			if e.ns == ns {
				fmt.Fprintf(&b, "%s\t%s\n", e.ip, e.name)
			}
		}
		hosts[ns] = []byte(b.String())
	}
	hosts[""] = []byte(all.String())
	a.mu.Lock()
	a.hosts = hosts
	workers := make([]*podWorker, 0, len(a.workers))
	for _, w := range a.workers {
		workers = append(workers, w)
	}
	a.mu.Unlock()
	for _, w := range workers {
		w.hostsChanged()
	}
	if a.cfg.HostsFile != "" {
		content := append([]byte("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost\n"), hosts[""]...)
		if err := rewriteInPlace(a.cfg.HostsFile, content); err != nil {
			a.cfg.Log.Error(err, "write the node's hosts file")
		}
	}
}

// hostsFor is the hosts file of a pod: localhost, the pod itself, Services.
func (a *Agent) hostsFor(ns, podName, podIP string) []byte {
	a.mu.Lock()
	svc, ok := a.hosts[ns]
	if !ok {
		svc = a.hosts[""]
	}
	a.mu.Unlock()
	head := fmt.Sprintf("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost\n%s\t%s\n", podIP, podName)
	return append([]byte(head), svc...)
}

func (a *Agent) recordMount(path string) {
	a.mu.Lock()
	a.mounts[path] = true
	a.mu.Unlock()
}

// stopAll stops every pod's containers at once and removes the sandboxes and
// the mount points created on the host.
func (a *Agent) stopAll() {
	a.mu.Lock()
	workers := make([]*podWorker, 0, len(a.workers))
	for _, w := range a.workers {
		workers = append(workers, w)
	}
	a.mu.Unlock()
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Add(1)
		go func() { defer wg.Done(); w.wait() }()
	}
	wg.Wait()
	a.mu.Lock()
	defer a.mu.Unlock()
	paths := make([]string, 0, len(a.mounts))
	for p := range a.mounts {
		paths = append(paths, p)
	}
	sort.Sort(sort.Reverse(sort.StringSlice(paths)))
	for _, p := range paths {
		_ = os.Remove(p) // only if empty: never remove what holds data
	}
}
