package e2e

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ebb-dev/ebb/test/cluster"
	"github.com/ebb-dev/ebb/test/e2e/install"
)

// partitionTable is the nftables table of TestPartitionBetweenActivators,
// of its own (inet family), so nothing else's rules are touched; a local
// cluster's removal sweeps it too.
const partitionTable = cluster.PartitionTable

// partitionFor is how long each phase keeps the two activators apart.
const partitionFor = 20 * time.Second

// TestPartitionBetweenActivators: the network between the default pool's
// two activator pods is cut (nothing else: both still reach the API
// server, the apps and their clients), first by dropping every packet
// between them, then by answering every TCP segment with a reset (what a
// network policy or a closed port gives), both directions, for
// partitionFor each. A refusal is not a crash: while they are apart, no
// request is lost — to an app at zero whose requests are held (it never
// starts), to an app woken during the partition, to a warm app through
// its Service and through the activators' Service — the Lease keeps its
// holder, and the hand-off slice keeps listing both activators (every
// change of either is recorded and must not happen).
func TestPartitionBetweenActivators(t *testing.T) {
	ctx := t.Context()
	const ns = "e2e-partition"
	removePartition() // a table left by a run that was killed
	t.Cleanup(removePartition)
	activatorsBackAtCleanup(t)

	delay := func(d string) func(*appsv1.Deployment) {
		return func(dep *appsv1.Deployment) {
			c := &dep.Spec.Template.Spec.Containers[0]
			c.Env = append(c.Env, corev1.EnvVar{Name: "STARTUP_DELAY", Value: d})
		}
	}
	deploy := func(name string, edit func(*appsv1.Deployment)) *install.AppAtZero {
		a, err := ebb.DeployAtZeroWith(ctx, lc, ns, name, scaling, edit, t.Logf)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	// Names of their own: an app's host is <name>.example.com, and another
	// test's app of the same name would take its requests.
	held := deploy("cut-held", delay("10m")) // never starts: its requests stay held
	wake := map[string]*install.AppAtZero{"drop": deploy("cut-wake-drop", delay("4s")), "reset": deploy("cut-wake-reset", delay("4s"))}
	warm := deploy("cut-warm", nil)
	if r := install.Send(ctx, warm.URL, warm.Host, 1, 90*time.Second); install.Failures(r) != nil {
		t.Fatalf("waking %s: %v", warm.Name, install.Failures(r))
	}
	warmTr := startLoad(ctx, warm.URL, warm.Host, 50*time.Millisecond, 10*time.Second) // keeps it warm
	defer warmTr.stop()
	actSvc, err := lc.Client.CoreV1().Services(ebb.Namespace).Get(ctx, ebb.Fullname+"-activator", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	viaActivator := "http://" + net.JoinHostPort(actSvc.Spec.ClusterIP, strconv.Itoa(int(actSvc.Spec.Ports[0].Port))) + "/"

	waitBothActivatorsInSlice(t, held)
	pods := defaultPoolActivators(t)
	a, b := pods[0], pods[1]
	lease := leaseHolder(t)
	t.Logf("activators %s (%s) and %s (%s); the Lease is %s's", a.Name, a.Status.PodIP, b.Name, b.Status.PodIP, lease)

	// Everything that must not change, recorded from before the partition
	// until after it heals.
	rec := watchLeadership(t, ns, held.Name)
	defer rec.stop()
	time.Sleep(kubeProxyLag) // kube-proxy has both; the recorder has its first state

	// Traffic for the whole scenario.
	heldTr := startLoad(ctx, held.URL, held.Host, 100*time.Millisecond, time.Second)
	defer heldTr.stop()
	warmViaTr := startLoad(ctx, viaActivator, warm.Host, 50*time.Millisecond, 10*time.Second)
	defer warmViaTr.stop()
	time.Sleep(2 * time.Second)

	for _, phase := range []string{"drop", "reset"} {
		counters := partition(t, a.Status.PodIP, b.Status.PodIP, phase)
		start := time.Now()
		time.Sleep(3 * time.Second) // a refusal-based failure detector has had its chance
		woken := install.Send(ctx, wake[phase].URL, wake[phase].Host, 20, 60*time.Second)
		if err := install.Failures(woken); err != nil {
			t.Errorf("%s: requests to %s, at zero and woken during the partition, not 200:\n%v", phase, wake[phase].Name, err)
		}
		var slowest time.Duration
		for _, r := range woken {
			slowest = max(slowest, r.Took)
		}
		time.Sleep(partitionFor - time.Since(start))
		n := counters()
		removePartition()
		t.Logf("%s: the activators apart from %s to %s (%v); %d packets between them %s; %d requests to %s held and woken, slowest answered after %v",
			phase, start.Format("15:04:05.000"), time.Now().Format("15:04:05.000"), time.Since(start).Round(time.Millisecond), n, map[string]string{"drop": "dropped", "reset": "answered with a reset"}[phase],
			len(woken), wake[phase].Name, slowest.Round(time.Millisecond))
		if n == 0 {
			t.Errorf("%s: no packet between the activators met the partition's rules: the test cut nothing", phase)
		}
		time.Sleep(5 * time.Second) // healed: anything the partition set off has happened
	}
	heldTr.stop()
	warmTr.stop()
	warmViaTr.stop()
	rec.stop()

	for _, c := range []struct {
		what string
		tr   *load
		want string // how every request must end
	}{
		{"to " + held.Name + " (at zero, held)", heldTr, "held"},
		{"to " + warm.Name + " through its Service", warmTr, "200"},
		{"to " + warm.Name + " through the activators' Service", warmViaTr, "200"},
	} {
		got := c.tr.outcomes()
		t.Logf("requests %s: %v", c.what, got)
		for k, n := range got {
			if k != c.want && n > 0 {
				t.Errorf("requests %s: %d ended %q, want every one %q", c.what, n, k, c.want)
			}
		}
		if got[c.want] < 100 {
			t.Errorf("requests %s: only %d ended %q: the traffic did not run", c.what, got[c.want], c.want)
		}
	}
	changes := rec.changes()
	t.Logf("the Lease and %s's hand-off slice, from before the partition until after it healed:\n%s", held.Name, strings.Join(changes, "\n"))
	want := []string{"lease holder " + lease, "slice [" + strings.Join(sortedIPs(a, b), " ") + "]"}
	if len(changes) != len(want) {
		t.Errorf("the Lease or the hand-off slice changed (%d states recorded, want the %d first ones only)", len(changes), len(want))
	}
	for i, w := range want {
		if i >= len(changes) || !strings.HasSuffix(changes[i], w) {
			t.Errorf("first state %d: want %q, recorded %v", i, w, changes)
			break
		}
	}
}

// defaultPoolActivators returns the default pool's two activator pods.
func defaultPoolActivators(t *testing.T) []corev1.Pod {
	t.Helper()
	list, err := lc.Client.CoreV1().Pods(ebb.Namespace).List(t.Context(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=ebb-activator"})
	if err != nil {
		t.Fatal(err)
	}
	var pods []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil && p.Status.PodIP != "" {
			pods = append(pods, p)
		}
	}
	if len(pods) != 2 {
		t.Fatalf("%d activator pods of the default pool, want 2", len(pods))
	}
	return pods
}

func leaseHolder(t *testing.T) string {
	t.Helper()
	l, err := lc.Client.CoordinationV1().Leases(ebb.Namespace).Get(t.Context(), ebb.Names.ClusterScopedName("activator"), metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
		t.Fatalf("the activators' Lease has no holder: %v", err)
	}
	return *l.Spec.HolderIdentity
}

func sortedIPs(pods ...corev1.Pod) []string {
	var ips []string
	for _, p := range pods {
		ips = append(ips, p.Status.PodIP)
	}
	slices.Sort(ips)
	return ips
}

// partition cuts the network between the pods at ipA and ipB, both ways,
// in an nftables table of the test's own: mode "drop" drops every packet,
// "reset" answers TCP with a reset (and drops the rest). It returns a func
// that reads how many packets the rules met.
func partition(t *testing.T, ipA, ipB, mode string) func() int {
	t.Helper()
	var rules strings.Builder
	for _, d := range [][2]string{{ipA, ipB}, {ipB, ipA}} {
		if mode == "reset" {
			fmt.Fprintf(&rules, "\t\tip saddr %s ip daddr %s meta l4proto tcp counter reject with tcp reset\n", d[0], d[1])
		}
		fmt.Fprintf(&rules, "\t\tip saddr %s ip daddr %s counter drop\n", d[0], d[1])
	}
	// The node's bridge passes the frames it forwards between two pods'
	// ports through IPv4's forward hook (br_netfilter,
	// bridge-nf-call-iptables=1, which kube-proxy needs too), where reject
	// works (the bridge family's reject is not built into every kernel).
	script := fmt.Sprintf("table inet %s {\n\tchain forward {\n\t\ttype filter hook forward priority -300; policy accept;\n%s\t}\n}\n", partitionTable, rules.String())
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft -f (partition %s):\n%s%v: %s", mode, script, err, out)
	}
	t.Logf("partition (%s) between %s and %s", mode, ipA, ipB)
	return func() int {
		out, err := exec.Command("nft", "list", "table", "inet", partitionTable).Output()
		if err != nil {
			t.Errorf("nft list table inet %s: %v", partitionTable, err)
			return 0
		}
		n := 0
		for _, m := range regexp.MustCompile(`counter packets (\d+)`).FindAllStringSubmatch(string(out), -1) {
			k, _ := strconv.Atoi(m[1])
			n += k
		}
		return n
	}
}

// removePartition deletes the test's table, if it is there.
func removePartition() {
	_ = exec.Command("nft", "delete", "table", "inet", partitionTable).Run()
}

// leadershipLog records each state of the activators' Lease holder and of
// one Service's hand-off slice addresses, when it changes.
type leadershipLog struct {
	mu     sync.Mutex
	states []string
	last   map[string]string
	cancel context.CancelFunc
	done   sync.WaitGroup
}

func watchLeadership(t *testing.T, ns, svc string) *leadershipLog {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	l := &leadershipLog{last: map[string]string{}, cancel: cancel}
	leaseName := ebb.Names.ClusterScopedName("activator")
	note := func(kind, state string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.last[kind] == state {
			return
		}
		l.last[kind] = state
		l.states = append(l.states, time.Now().Format("15:04:05.000")+" "+kind+" "+state)
	}
	// Polled rather than watched: a state the API server holds for a few
	// milliseconds is still seen at this rate, and a watch that ends is not
	// mistaken for a change.
	poll := func(every time.Duration, f func(context.Context)) {
		l.done.Go(func() {
			tick := time.NewTicker(every)
			defer tick.Stop()
			for {
				f(ctx)
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		})
	}
	poll(20*time.Millisecond, func(ctx context.Context) {
		lease, err := lc.Client.CoordinationV1().Leases(ebb.Namespace).Get(ctx, leaseName, metav1.GetOptions{})
		switch {
		case ctx.Err() != nil:
		case err != nil:
			note("lease", "absent ("+err.Error()+")")
		default:
			note("lease", "holder "+holderOf(lease))
		}
	})
	poll(20*time.Millisecond, func(ctx context.Context) {
		list, err := lc.Client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc + "," +
			discoveryv1.LabelManagedBy + "=" + ebb.Names.EndpointSliceManagedBy()})
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			note("slice", "unknown ("+err.Error()+")")
			return
		}
		var ips []string
		for _, s := range list.Items {
			for _, e := range s.Endpoints {
				if e.Conditions.Ready == nil || *e.Conditions.Ready {
					ips = append(ips, e.Addresses...)
				}
			}
		}
		slices.Sort(ips)
		note("slice", "["+strings.Join(ips, " ")+"]")
	})
	return l
}

func holderOf(l *coordinationv1.Lease) string {
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

func (l *leadershipLog) stop() {
	l.cancel()
	l.done.Wait()
}

func (l *leadershipLog) changes() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := slices.Clone(l.states)
	// The lease line and the slice line of the first poll may come in
	// either order.
	if len(s) >= 2 && strings.Contains(s[0], " slice ") && strings.Contains(s[1], " lease ") {
		s[0], s[1] = s[1], s[0]
	}
	return s
}

// load sends a GET for host to url every interval, each on its own
// connection, and counts how each ended: "200", "held" (the client's
// timeout passed: the request was held), another status, or the error.
type load struct {
	mu     sync.Mutex
	counts map[string]int
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

func startLoad(ctx context.Context, url, host string, interval, timeout time.Duration) *load {
	ctx, cancel := context.WithCancel(ctx)
	l := &load{counts: map[string]int{}, cancel: cancel, done: make(chan struct{})}
	client := &http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true}}
	go func() {
		defer close(l.done)
		var wg sync.WaitGroup
		defer wg.Wait()
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for n := 0; n < 100_000; n++ { // bounded: the test stops it long before
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			wg.Go(func() {
				r := install.Get(ctx, client, url, host)
				if ctx.Err() != nil {
					return // cut by the end of the scenario
				}
				var ne net.Error
				var k string
				switch {
				case r.Err == nil:
					k = strconv.Itoa(r.Status)
				case errors.As(r.Err, &ne) && ne.Timeout():
					k = "held"
				case errors.Is(r.Err, syscall.ECONNREFUSED) || strings.Contains(r.Err.Error(), "connection refused"):
					k = "refused"
				case errors.Is(r.Err, syscall.ECONNRESET) || strings.Contains(r.Err.Error(), "connection reset"):
					k = "reset"
				default:
					k = r.Err.Error()
				}
				l.mu.Lock()
				l.counts[k]++
				l.mu.Unlock()
			})
		}
	}()
	return l
}

func (l *load) stop() {
	l.once.Do(func() {
		l.cancel()
		<-l.done
	})
}

func (l *load) outcomes() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.counts)
}
