package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/test/cluster"
	"github.com/ebb-dev/ebb/test/e2e/install"
)

// poolValues add two activator pools to the e2e release, one replica
// each: a (routes labelled e2e-pool=a) and b (e2e-pool=b, 400 request
// slots, so a flood reaches its fair share). Every other route stays with
// the default pool, but for those in a namespace labelled e2e-no-pool:
// no pool admits them.
var poolValues = []string{
	"activator.namespaceSelector.matchExpressions[0].key=e2e-no-pool", "activator.namespaceSelector.matchExpressions[0].operator=DoesNotExist",
	"activator.pools[0].name=a", "activator.pools[0].replicas=1", "activator.pools[0].routeSelector.matchLabels.e2e-pool=a",
	"activator.pools[1].name=b", "activator.pools[1].replicas=1", "activator.pools[1].routeSelector.matchLabels.e2e-pool=b",
	"activator.pools[1].maxHeld=400", "activator.pools[1].queueSize=400",
}

// poolBSlots is pool b's maxHeld: an app alone there holds at most half.
const poolBSlots = 400

// poolApp deploys an app at zero whose pod template puts its route in
// pool ("" for the default pool), with the test app's environment env.
func poolApp(t *testing.T, ns, name, pool string, env ...string) *install.AppAtZero {
	t.Helper()
	a, err := ebb.DeployAtZeroWith(t.Context(), lc, ns, name, scaling, func(d *appsv1.Deployment) {
		if pool != "" {
			d.Spec.Template.Annotations[ebb.Names.Key("route-labels")] = "e2e-pool=" + pool
		}
		c := &d.Spec.Template.Spec.Containers[0]
		for i := 0; i+1 < len(env); i += 2 {
			c.Env = append(c.Env, corev1.EnvVar{Name: env[i], Value: env[i+1]})
		}
	}, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			dumpState(t, ns)
		}
	})
	return a
}

// poolOf waits until a's AppRoute says which pool admits it, with every
// ready replica of that pool serving it, and returns the pool.
func poolOf(t *testing.T, a *install.AppAtZero, want string) {
	t.Helper()
	var last string
	if err := cluster.WaitFor(t.Context(), 30*time.Second, "AppRoute "+a.Name+" admitted by pool "+want, func(ctx context.Context) (bool, error) {
		r, err := ebb.AppRoute(ctx, lc, a.Namespace, a.Name)
		if err != nil {
			return false, err
		}
		adm := meta.FindStatusCondition(r.Status.Conditions, routingv1alpha1.ConditionAdmitted)
		prop := meta.FindStatusCondition(r.Status.Conditions, routingv1alpha1.ConditionPropagated)
		last = fmt.Sprintf("pools %+v; Admitted %+v; Propagated %+v", r.Status.Pools, adm, prop)
		return len(r.Status.Pools) == 1 && r.Status.Pools[0].Name == want &&
			adm != nil && adm.Status == metav1.ConditionTrue && strings.Contains(adm.Message, "pool "+want+" admits") &&
			prop != nil && prop.Status == metav1.ConditionTrue && strings.Contains(prop.Message, "of pool "+want), nil
	}); err != nil {
		t.Fatalf("%v; last: %s", err, last)
	}
}

// poolPods lists the activator pods of pool (ready or not).
func poolPods(t *testing.T, pool string) []corev1.Pod {
	t.Helper()
	pods, err := lc.Client.CoreV1().Pods(ebb.Namespace).List(t.Context(), metav1.ListOptions{LabelSelector: ebb.Names.Key("activator-pool") + "=" + pool})
	if err != nil {
		t.Fatal(err)
	}
	return pods.Items
}

// coldStartsSeen returns, per pool, how many cold starts of a its ready
// activator pods recorded (the count of a's cold-start histogram): the
// pods that held a's requests.
func coldStartsSeen(t *testing.T, a *install.AppAtZero) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, pool := range []string{"default", "a", "b"} {
		out[pool] = int(poolMetric(t, pool, func(line string) bool {
			return strings.HasPrefix(line, "ebb_activator_cold_start_duration_seconds_count{") && strings.Contains(line, `app="`+a.Name+`"`) &&
				strings.Contains(line, `namespace="`+a.Namespace+`"`)
		}))
	}
	return out
}

// heldByPool sums ebb_activator_held_requests over pool's pods.
func heldByPool(t *testing.T, pool string) int {
	return int(poolMetric(t, pool, func(line string) bool { return strings.HasPrefix(line, "ebb_activator_held_requests{") }))
}

// poolMetric sums the values of the /metrics lines of pool's running
// activator pods that keep selects.
func poolMetric(t *testing.T, pool string, keep func(line string) bool) float64 {
	t.Helper()
	total := 0.0
	for _, p := range poolPods(t, pool) {
		if p.Status.PodIP == "" || p.DeletionTimestamp != nil {
			continue
		}
		resp, err := http.Get("http://" + net.JoinHostPort(p.Status.PodIP, "8081") + "/metrics")
		if err != nil {
			t.Logf("metrics of %s: %v", p.Name, err)
			continue
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if line := sc.Text(); keep(line) {
				v, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
				total += v
			}
		}
		resp.Body.Close()
	}
	return total
}

// handOffPools names the pools whose hand-off slices a's Service has.
func handOffPools(t *testing.T, a *install.AppAtZero) []string {
	t.Helper()
	list, err := lc.Client.DiscoveryV1().EndpointSlices(a.Namespace).List(t.Context(), metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + a.Name + "," +
		discoveryv1.LabelManagedBy + "=" + ebb.Names.EndpointSliceManagedBy()})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range list.Items {
		out = append(out, s.Labels[ebb.Names.Key("activator-pool")])
	}
	slices.Sort(out)
	return out
}

// coldStart sends one request to a at zero and returns how long it took
// to be answered 200.
func coldStart(t *testing.T, a *install.AppAtZero) time.Duration {
	t.Helper()
	r := install.Get(t.Context(), &http.Client{Timeout: 90 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}, a.URL, a.Host)
	if r.Err != nil || r.Status != http.StatusOK {
		t.Fatalf("cold start of %s: %d %q %v", a.Name, r.Status, r.Body, r.Err)
	}
	return r.Took
}

// TestPoolColdStartsThroughItsOwnPool: three apps, one in pool a, one in
// pool b, one in the default pool: each route is admitted by its pool
// (status), its hand-off slice at zero is its pool's only, and its cold
// start is held by its pool's activators and no other's.
func TestPoolColdStartsThroughItsOwnPool(t *testing.T) {
	apps := map[string]*install.AppAtZero{
		"a":       poolApp(t, "e2e-pools", "pool-a", "a"),
		"b":       poolApp(t, "e2e-pools", "pool-b", "b"),
		"default": poolApp(t, "e2e-pools", "pool-default", ""),
	}
	took, ours := map[string][]time.Duration{}, map[string][]time.Duration{}
	measure := func(pool string) {
		a := apps[pool]
		begin := time.Now()
		d := coldStart(t, a)
		phases, o := lastColdStart(t, a, begin)
		took[pool], ours[pool] = append(took[pool], d), append(ours[pool], o)
		t.Logf("%s: cold start %v (%s)", a.Name, d.Round(time.Millisecond), phases)
	}
	for _, pool := range []string{"a", "b", "default"} {
		a := apps[pool]
		poolOf(t, a, pool)
		if got := handOffPools(t, a); !slices.Equal(got, []string{pool}) {
			t.Errorf("%s at zero: hand-off slices of pools %v, want only %s's", a.Name, got, pool)
		}
		measure(pool)
		seen := coldStartsSeen(t, a)
		t.Logf("%s: held by pools %v", a.Name, seen)
		for p, n := range seen {
			if p != pool && n > 0 {
				t.Errorf("%s (pool %s) was held by pool %s's activators too", a.Name, pool, p)
			}
		}
		if seen[pool] == 0 {
			t.Errorf("%s (pool %s): no activator of its pool recorded its cold start", a.Name, pool)
		}
	}
	// Two more cold starts each of pool a's app and the default pool's,
	// alternating, for the figure.
	for range 2 {
		for _, pool := range []string{"a", "default"} {
			if err := ebb.WaitAtZero(t.Context(), lc, apps[pool], 2*time.Minute); err != nil {
				t.Fatal(err)
			}
			measure(pool)
		}
	}
	fmt.Printf("FIGURE cold start through pool a vs the default pool (same run, 3 each, medians): %v vs %v (a÷default %.2f); ebb's and KEDA's part %v vs %v\n",
		median(took["a"]).Round(time.Millisecond), median(took["default"]).Round(time.Millisecond),
		median(took["a"]).Seconds()/median(took["default"]).Seconds(), median(ours["a"]).Round(time.Millisecond), median(ours["default"]).Round(time.Millisecond))
}

// TestPoolKilledLeavesOthersServing: every activator pod of pool a is
// force-deleted (a lost node would do that): apps of pool b and of the
// default pool still cold-start and serve; pool a's app cold-starts once
// its pool's pods are back.
func TestPoolKilledLeavesOthersServing(t *testing.T) {
	ka := poolApp(t, "e2e-pool-kill", "kill-a", "a")
	kb := poolApp(t, "e2e-pool-kill", "kill-b", "b")
	kd := poolApp(t, "e2e-pool-kill", "kill-default", "")
	t.Cleanup(func() {
		if err := install.WaitDeploymentReady(context.Background(), lc, ebb.Namespace, ebb.Fullname+"-activator-a", 2*time.Minute); err != nil {
			t.Errorf("pool a back: %v", err)
		}
	})
	for _, p := range poolPods(t, "a") {
		if err := lc.Client.CoreV1().Pods(ebb.Namespace).Delete(t.Context(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}); err != nil {
			t.Fatal(err)
		}
		t.Logf("force-deleted pool a's activator %s", p.Name)
	}
	for _, a := range []*install.AppAtZero{kb, kd} {
		t.Logf("%s cold-started in %v with pool a down", a.Name, coldStart(t, a).Round(time.Millisecond))
	}
	if err := install.WaitDeploymentReady(t.Context(), lc, ebb.Namespace, ebb.Fullname+"-activator-a", 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	poolOf(t, ka, "a")
	if err := install.WaitRoutedToActivator(t.Context(), ka.URL, time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s cold-started in %v once pool a was back", ka.Name, coldStart(t, ka).Round(time.Millisecond))
}

// TestPoolFairShareUnderFlood: one app floods pool b (400 slots) with
// 300 requests: it holds its fair share (200) and gets 503 with
// Retry-After beyond it; meanwhile another app of pool b cold-starts in
// its normal time (measured before the flood) and nothing of it is
// refused.
func TestPoolFairShareUnderFlood(t *testing.T) {
	ctx := t.Context()
	flood := poolApp(t, "e2e-pool-flood", "flood", "b", "STARTUP_DELAY", "20s")
	calm := poolApp(t, "e2e-pool-flood", "calm", "b")
	begin := time.Now()
	normal := coldStart(t, calm)
	phases, normalOurs := lastColdStart(t, calm, begin)
	t.Logf("calm's cold start before the flood: %s", phases)
	if err := ebb.WaitAtZero(ctx, lc, calm, 2*time.Minute); err != nil {
		t.Fatal(err)
	}

	const n, share = 300, poolBSlots / 2
	var floodResults []install.Result
	var wg sync.WaitGroup
	wg.Go(func() { floodResults = install.Send(ctx, flood.URL, flood.Host, n, 90*time.Second) })
	// The flood is held (its share) or refused before the other app comes,
	// and the flooding app's pod has started (it binds its port 20 s
	// later): the node is not busy starting it while the other one starts.
	if err := cluster.WaitFor(ctx, 30*time.Second, "pool b holding the flood, the flooding app's container started", func(ctx context.Context) (bool, error) {
		pods, err := lc.Client.CoreV1().Pods(flood.Namespace).List(ctx, metav1.ListOptions{LabelSelector: ebb.Names.AppLabel() + "=" + flood.Name})
		if err != nil || len(pods.Items) == 0 {
			return false, err
		}
		for _, c := range pods.Items[0].Status.ContainerStatuses {
			if !ptr.Deref(c.Started, false) {
				return false, nil
			}
		}
		return heldByPool(t, "b") >= share, nil
	}); err != nil {
		t.Fatal(err)
	}
	begin = time.Now()
	during := coldStart(t, calm)
	phases, duringOurs := lastColdStart(t, calm, begin)
	t.Logf("calm's cold start under the flood: %s", phases)
	wg.Wait()
	refused, served := 0, 0
	for _, r := range floodResults {
		switch {
		case r.Err == nil && r.Status == http.StatusOK:
			served++
		case r.Err == nil && r.Status == http.StatusServiceUnavailable && strings.Contains(r.Body, "fair share"):
			refused++
		default:
			t.Errorf("flood request: %d %q %v, want 200 (held) or 503 naming the fair share", r.Status, r.Body, r.Err)
		}
	}
	t.Logf("flood of %d: %d held and served, %d refused with 503; the other app's cold start %v under the flood, %v before it",
		n, served, refused, during.Round(time.Millisecond), normal.Round(time.Millisecond))
	if served > share || refused < n-share {
		t.Errorf("the flooding app held %d requests, more than its fair share of %d (%d slots, alone)", served, share, poolBSlots)
	}
	// The other app was not refused (coldStart fails on a 503) nor queued
	// behind the flood: ebb's and KEDA's part of its cold start (held →
	// scaled, sidecar ready → first byte) stays within a second of what it
	// was. The flooding app's own cold start loads this 2-core node (its
	// pod, its sidecar probed while not ready), which slows the other
	// pod's start (ContainersStarted) by seconds and ebb's part by some
	// hundred ms; both are reported, the total bounded only against
	// starvation.
	if duringOurs > normalOurs+time.Second || during > normal+15*time.Second {
		t.Errorf("the other app's cold start took %v under the flood (ebb's and KEDA's part %v), %v without (%v): one app's backlog slowed another's",
			during, duringOurs, normal, normalOurs)
	}
	fmt.Printf("FIGURE fair share: a flood of %d on a %d-slot pool: %d held, %d refused (503 + Retry-After); another app's cold start %v under it vs %v before, of which ebb's and KEDA's part %v vs %v\n",
		n, poolBSlots, served, refused, during.Round(time.Millisecond), normal.Round(time.Millisecond), duringOurs.Round(time.Millisecond), normalOurs.Round(time.Millisecond))
}

// lastColdStart waits for a's status.lastColdStart of a cold start that
// began after since, and returns it with its phases in words and the part
// of it that is ebb's and KEDA's (held → scaled, sidecar ready → first
// byte): the rest is the control plane's and the kubelet's pod start.
func lastColdStart(t *testing.T, a *install.AppAtZero, since time.Time) (string, time.Duration) {
	t.Helper()
	var out string
	var ours time.Duration
	if err := cluster.WaitFor(t.Context(), 10*time.Second, "status.lastColdStart of "+a.Name, func(ctx context.Context) (bool, error) {
		r, err := ebb.AppRoute(ctx, lc, a.Namespace, a.Name)
		if err != nil || r.Status.LastColdStart == nil || r.Status.LastColdStart.Began.Time.Before(since.Add(-time.Second)) {
			return false, err
		}
		parts := []string{r.Status.LastColdStart.Total.Duration.Round(time.Millisecond).String() + ":"}
		ours = 0
		for _, p := range r.Status.LastColdStart.Phases {
			parts = append(parts, p.Name+" "+p.Duration.Duration.Round(time.Millisecond).String())
			switch p.Name {
			case "ScalerTold", "Scaled", "SidecarReady", "FirstByte":
				ours += p.Duration.Duration
			}
		}
		out = strings.Join(parts, " ")
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	return out, ours
}

// TestPoolMoveUnderTraffic: an app at zero in pool a, slow to start, gets
// a request every 100 ms; its pod template is relabelled to pool b. The
// route's status shows the new binding, its hand-off slice becomes pool
// b's, and no request is lost.
func TestPoolMoveUnderTraffic(t *testing.T) {
	ctx := t.Context()
	a := poolApp(t, "e2e-pool-move", "mover", "a", "STARTUP_DELAY", "8s")
	poolOf(t, a, "a")
	client := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	var mu sync.Mutex
	var results []install.Result
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := 0; i < 300; i++ { // at most 30 s of traffic, within pool b's fair share while held
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			wg.Go(func() {
				r := install.Get(ctx, client, a.URL, a.Host)
				mu.Lock()
				results = append(results, r)
				mu.Unlock()
			})
		}
	})
	time.Sleep(time.Second)
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d, err := lc.Client.AppsV1().Deployments(a.Namespace).Get(ctx, a.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		d.Spec.Template.Annotations[ebb.Names.Key("route-labels")] = "e2e-pool=b"
		_, err = lc.Client.AppsV1().Deployments(a.Namespace).Update(ctx, d, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	moved := time.Now()
	poolOf(t, a, "b")
	t.Logf("status shows pool b %v after the relabel", time.Since(moved).Round(time.Millisecond))
	time.Sleep(12 * time.Second) // the app starts (8 s) and serves under traffic
	close(stop)
	wg.Wait()
	lost := 0
	for _, r := range results {
		if r.Err != nil || r.Status != http.StatusOK {
			lost++
		}
	}
	if err := install.Failures(results); err != nil {
		t.Errorf("requests lost in the move:\n%v", err)
	}
	seen := coldStartsSeen(t, a)
	t.Logf("%d requests, %d lost; cold starts recorded by pools %v", len(results), lost, seen)
	if len(results) < 100 {
		t.Errorf("only %d requests sent: the traffic did not run", len(results))
	}
	if seen["b"] == 0 {
		t.Errorf("pool b held none of the moved app's requests: the hand-off slice did not move")
	}
	fmt.Printf("FIGURE move between pools under traffic: %d requests, %d lost\n", len(results), lost)
}

// TestPoolHoldsTenThousand: pool a's one activator holds 10,000 requests
// of one app (its queue raised to 10,000; the pool's 20,000 slots give
// one app 10,000): the activator's resident memory before and while it
// holds them.
func TestPoolHoldsTenThousand(t *testing.T) {
	const n = 10_000
	ctx := t.Context()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil && lim.Cur < n+1000 {
		lim.Cur = min(lim.Max, n+4096)
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur < n+1000 {
			t.Skipf("cannot open %d connections: RLIMIT_NOFILE %d (%v)", n, lim.Cur, err)
		}
	}
	a := poolApp(t, "e2e-pool-rss", "many", "a", "STARTUP_DELAY", "10m")
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d, err := lc.Client.AppsV1().Deployments(a.Namespace).Get(ctx, a.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		d.Spec.Template.Annotations[ebb.Names.Key("queue-size")] = strconv.Itoa(n)
		_, err = lc.Client.AppsV1().Deployments(a.Namespace).Update(ctx, d, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	pods := poolPods(t, "a")
	if len(pods) != 1 {
		t.Fatalf("%d pods in pool a, want 1", len(pods))
	}
	pid, err := activatorPID(pods[0].Name)
	if err != nil {
		t.Fatal(err)
	}
	before := rss(t, pid)
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	addr := strings.TrimSuffix(strings.TrimPrefix(a.URL, "http://"), "/") + ":80"
	req := []byte("GET / HTTP/1.1\r\nHost: " + a.Host + "\r\n\r\n")
	deadline := time.Now().Add(2 * time.Minute)
	for len(conns) < n && time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatalf("connection %d: %v", len(conns), err)
		}
		if _, err := c.Write(req); err != nil {
			t.Fatalf("request %d: %v", len(conns), err)
		}
		conns = append(conns, c)
	}
	if err := cluster.WaitFor(ctx, time.Minute, fmt.Sprintf("pool a holding %d requests", n), func(context.Context) (bool, error) {
		return heldByPool(t, "a") >= n, nil
	}); err != nil {
		t.Fatalf("%v (held %d)", err, heldByPool(t, "a"))
	}
	holding := rss(t, pid)
	t.Logf("pool a's activator: RSS %.1f MiB idle, %.1f MiB holding %d requests (%.1f KiB each)",
		before, holding, n, (holding-before)*1024/float64(n))
	fmt.Printf("FIGURE activator RSS per pool holding %d requests: %.1f MiB (idle %.1f MiB)\n", n, holding, before)
	if holding > 400 {
		t.Errorf("RSS %.1f MiB holding %d requests: over the 512Mi limit's safety margin", holding, n)
	}
}

// rss is the resident set of process pid in MiB.
func rss(t *testing.T, pid int) float64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")))
			return float64(kb) / 1024
		}
	}
	t.Fatalf("no VmRSS for %d", pid)
	return 0
}

// TestPoolNoneAdmits: a route no pool selects (its namespace is outside the
// default pool's namespaceSelector) gets Admitted=False NoPoolSelects,
// saying why, no pool entry, and no hand-off slice.
func TestPoolNoneAdmits(t *testing.T) {
	ctx := t.Context()
	ns, name := "e2e-pool-none", "orphan"
	labels := ebb.OptIn()
	labels["e2e-no-pool"] = "true"
	if err := lc.EnsureNamespace(ctx, ns, labels); err != nil {
		t.Fatal(err)
	}
	if _, err := lc.Client.CoreV1().Services(ns).Create(ctx, ebb.Service(ns, name), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := lc.Client.AppsV1().Deployments(ns).Create(ctx, ebb.App(ns, name, name+".example.com", 0), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var last string
	if err := cluster.WaitFor(ctx, 60*time.Second, "AppRoute "+name+" Admitted=False NoPoolSelects", func(ctx context.Context) (bool, error) {
		r, err := ebb.AppRoute(ctx, lc, ns, name)
		if err != nil {
			return false, nil
		}
		adm := meta.FindStatusCondition(r.Status.Conditions, routingv1alpha1.ConditionAdmitted)
		last = fmt.Sprintf("pools %+v; Admitted %+v", r.Status.Pools, adm)
		return adm != nil && adm.Status == metav1.ConditionFalse && adm.Reason == "NoPoolSelects" && len(r.Status.Pools) == 0 &&
			strings.Contains(adm.Message, "no activator pool selects the route") && strings.Contains(adm.Message, "default (namespaceSelector !e2e-no-pool)"), nil
	}); err != nil {
		t.Fatalf("%v; last: %s", err, last)
	}
	t.Logf("%s", last)
	time.Sleep(2 * time.Second) // a hand-off slice would be out within a reconcile
	if got := handOffPools(t, &install.AppAtZero{Namespace: ns, Name: name}); len(got) != 0 {
		t.Errorf("hand-off slices of pools %v for a route no pool admits", got)
	}
}
