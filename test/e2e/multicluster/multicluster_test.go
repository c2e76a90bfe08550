package multicluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ebb-dev/ebb/test/cluster"
	"github.com/ebb-dev/ebb/test/e2e/install"
)

// Windows of the tests' FederatedScales: headroom moves after 5 s at max,
// a member unread for 5 s loses its min share. The hub reads every 1 s.
const (
	stabilization = 5
	unreachable   = 5
	interval      = time.Second
)

// TestMultiClusterWakesOnlyWhereRequested: global min 0, max 6 over a and
// b: both sit at zero with max 3 each, and a request in b wakes b only.
func TestMultiClusterWakesOnlyWhereRequested(t *testing.T) {
	ctx := t.Context()
	ns, name := "mc-wake", "mc-wake"
	apps := deployBoth(t, ns, name, install.Scaling{Max: 6, PollingInterval: 1, Cooldown: 30, TargetConcurrency: 1})
	createFederatedScale(t, ns, name, 0, 6, stabilization, unreachable)
	for _, m := range []member{a, b} {
		waitBounds(t, m, ns, name, 0, 3, 30*time.Second)
	}
	for _, m := range []member{a, b} {
		if r, err := replicas(ctx, m, ns, name); err != nil || r != 0 {
			t.Fatalf("cluster %s: %d replicas (%v), want 0 before any request", m.name, r, err)
		}
	}
	res := install.Send(ctx, apps["b"].URL, apps["b"].Host, 1, 30*time.Second)
	if err := install.Failures(res); err != nil {
		t.Fatalf("the request in b: %v\n%s", err, b.ebb.Diagnose(ctx, b.c, ns, name))
	}
	t.Logf("a request in b answered in %s", res[0].Took.Round(time.Millisecond))
	if r, err := replicas(ctx, b, ns, name); err != nil || r < 1 {
		t.Fatalf("cluster b: %d replicas (%v) after its request, want 1 or more", r, err)
	}
	// a stays at zero while b serves (b's cooldown is 30 s).
	for i := 0; i < 50; i++ {
		if r, err := replicas(ctx, a, ns, name); err != nil || r != 0 {
			t.Fatalf("cluster a: %d replicas (%v) after a request in b, want 0", r, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestMultiClusterHeadroomMovesToLoad: global 0/6 over a and b. Load in
// one member beyond its max while the other is idle moves the idle
// member's headroom to it (the idle one keeps 1), and it scales past its
// first share; then the other way round, four times. The members' maxima
// and replicas never add up to more than 6 (checked every 200 ms), and
// under steady load nothing is written.
func TestMultiClusterHeadroomMovesToLoad(t *testing.T) {
	ctx := t.Context()
	ns, name := "mc-load", "mc-load"
	apps := deployBoth(t, ns, name, install.Scaling{Max: 6, PollingInterval: 1, Cooldown: 5, TargetConcurrency: 1, RateWindow: "3s", HPABehavior: fastHPA})
	createFederatedScale(t, ns, name, 0, 6, stabilization, unreachable)
	for _, m := range []member{a, b} {
		waitBounds(t, m, ns, name, 0, 3, 30*time.Second)
	}
	movesSeries := fmt.Sprintf(`ebb_federation_headroom_moves_total{name=%q,namespace=%q}`, name, ns)
	movesBefore := federationMetric(t, movesSeries)
	inv := watchGlobalMax(ctx, ns, name, 6)
	var took []time.Duration
	var writesPerMinute float64
	for i, m := range []member{a, b, a, b} {
		other := b
		if m.name == "b" {
			other = a
		}
		// The other member idle for longer than the stabilization window,
		// so what it used has left the window.
		if err := cluster.WaitFor(ctx, 90*time.Second, "cluster "+other.name+" at zero", func(ctx context.Context) (bool, error) {
			r, err := replicas(ctx, other, ns, name)
			return err == nil && r == 0, nil
		}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(stabilization*time.Second + 2*interval)
		before, err := readBounds(ctx, m, ns, name)
		if err != nil {
			t.Fatal(err)
		}
		l := startLoad(ctx, apps[m.name], 8, time.Second)
		// Watch for its max to grow, and since when the member has sat at
		// its max without a break (the HPA's ScalingLimited comes and goes
		// as a member wakes; the controller's stabilization counts only
		// the last stretch, and so does the figure).
		var atMaxSince time.Time
		var after bounds
		if err := cluster.WaitFor(ctx, 120*time.Second, fmt.Sprintf("cluster %s allowed more than %d", m.name, before.max), func(ctx context.Context) (bool, error) {
			after, err = readBounds(ctx, m, ns, name)
			if err == nil && after.max > before.max {
				return true, nil
			}
			at, err := atMax(ctx, m, ns, name, before.max)
			switch {
			case err != nil || !at:
				atMaxSince = time.Time{}
			case atMaxSince.IsZero():
				atMaxSince = time.Now()
			}
			return false, nil
		}); err != nil {
			l.end()
			st, _ := federatedStatus(ctx, ns, name)
			t.Fatalf("%v\nFederatedScale status: %v", err, st)
		}
		if atMaxSince.IsZero() {
			l.end()
			t.Fatalf("cycle %d: cluster %s allowed %d without sitting at its max %d", i, m.name, after.max, before.max)
		}
		atMaxAt := atMaxSince
		took = append(took, time.Since(atMaxAt))
		t.Logf("cycle %d: cluster %s at its max %d → allowed %d after %s", i, m.name, before.max, after.max, took[i].Round(time.Millisecond))
		if err := cluster.WaitFor(ctx, 60*time.Second, fmt.Sprintf("cluster %s past its share %d", m.name, before.max), func(ctx context.Context) (bool, error) {
			r, err := replicas(ctx, m, ns, name)
			return err == nil && int64(r) > before.max, nil
		}); err != nil {
			l.end()
			t.Fatal(err)
		}
		if i == 0 {
			// Steady load: count the writes of both ScaledObjects over a
			// minute (each write of a spec adds one to its generation).
			time.Sleep(2 * interval) // the move's last write lands
			var gens [2]int64
			for j, mm := range []member{a, b} {
				bd, err := readBounds(ctx, mm, ns, name)
				if err != nil {
					t.Fatal(err)
				}
				gens[j] = bd.generation
			}
			const steady = time.Minute
			time.Sleep(steady)
			var writes int64
			for j, mm := range []member{a, b} {
				bd, err := readBounds(ctx, mm, ns, name)
				if err != nil {
					t.Fatal(err)
				}
				writes += bd.generation - gens[j]
			}
			writesPerMinute = float64(writes) / steady.Minutes()
			if writes > 0 {
				t.Errorf("%d writes of min/max within a minute of steady load, want none", writes)
			}
		}
		ok, failed, last := l.end()
		if failed > 0 {
			t.Errorf("cycle %d: %d of %d requests failed in %s (last: %v)", i, failed, ok+failed, m.name, last)
		}
	}
	moves := federationMetric(t, movesSeries) - movesBefore
	if moves < float64(len(took)) {
		t.Errorf("%s grew by %v over %d moves", movesSeries, moves, len(took))
	}
	t.Logf("ebb-federation counted %v moves", moves)
	seen, broken := inv.end()
	if len(broken) > 0 {
		t.Errorf("%d of %d observations above the global max 6: %v", len(broken), seen, broken)
	}
	// The controller sees the member at its max up to a read after the
	// test does, moves at the first read a full window later, and the
	// write lands; a read's worth more for a loaded machine.
	bound := stabilization*time.Second + 5*interval
	for i, d := range took {
		if d > bound {
			t.Errorf("cycle %d: headroom moved %s after the member sat at its max; bound %s (stabilization %ds + 5 reads)", i, d.Round(time.Millisecond), bound, stabilization)
		}
	}
	t.Logf("FIGURE multicluster at-max→allowed-more: p50 %s p99 %s over %d moves (stabilization %ds, read every %s); global max held in %d of %d observations; %.1f min/max writes per minute under steady load",
		percentile(took, 50).Round(time.Millisecond), percentile(took, 99).Round(time.Millisecond), len(took), stabilization, interval, seen-len(broken), seen, writesPerMinute)
}

// TestMultiClusterMemberDown: global min 2, max 6 gives each member min 1.
// Cluster b's API server stops: a carries b's min (2) and keeps serving,
// and b's app, already running, keeps serving in b. b's API server back:
// each member has min 1 again.
func TestMultiClusterMemberDown(t *testing.T) {
	ctx := t.Context()
	ns, name := "mc-down", "mc-down"
	apps := deployBoth(t, ns, name, install.Scaling{Max: 6, PollingInterval: 1, Cooldown: 5, TargetConcurrency: 1, HPABehavior: fastHPA})
	createFederatedScale(t, ns, name, 2, 6, stabilization, unreachable)
	for _, m := range []member{a, b} {
		waitBounds(t, m, ns, name, 1, 3, 30*time.Second)
		// Its min pod ready and serving: what b keeps running without its
		// API server is what ran before. (While the app is Idle the
		// activators' hand-off slice is in its path too, a cooldownPeriod
		// before KEDA could take it to zero; they forward to the pod.)
		if err := cluster.WaitFor(ctx, 90*time.Second, "a ready pod of "+name+" in cluster "+m.name, func(ctx context.Context) (bool, error) {
			pods, err := m.ebb.PodsOf(ctx, m.c, ns, name)
			if err != nil {
				return false, nil
			}
			ready := 0
			for _, p := range pods {
				for _, c := range p.Status.Conditions {
					if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
						ready++
					}
				}
			}
			return ready >= 1, nil
		}); err != nil {
			t.Fatal(err)
		}
		if err := install.Failures(install.Send(ctx, apps[m.name].URL, apps[m.name].Host, 1, 10*time.Second)); err != nil {
			t.Fatalf("cluster %s: %v", m.name, err)
		}
	}
	l := startLoad(ctx, apps["a"], 1, 100*time.Millisecond)
	stopped := time.Now()
	b.c.StopAPIServer()
	restarted := false
	defer func() {
		if !restarted {
			if err := b.c.StartAPIServer(context.Background()); err != nil {
				t.Errorf("restart b's API server: %v", err)
			}
		}
	}()
	waitBounds(t, a, ns, name, 2, 3, time.Duration(unreachable)*time.Second+30*time.Second)
	t.Logf("b's API server stopped; a carries min 2 after %s", time.Since(stopped).Round(time.Millisecond))
	if err := a.c.WaitReplicas(ctx, ns, name, 2, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	st, err := federatedStatus(ctx, ns, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("status with b unreachable: %v", st["clusters"])
	// b's app serves in b without its API server.
	if err := install.Failures(install.Send(ctx, apps["b"].URL, apps["b"].Host, 1, 10*time.Second)); err != nil {
		t.Errorf("b's app while b's API server is down: %v", err)
	}
	back := time.Now()
	if err := b.c.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	restarted = true
	waitBounds(t, a, ns, name, 1, 3, 60*time.Second)
	waitBounds(t, b, ns, name, 1, 3, 60*time.Second)
	t.Logf("b's API server started again; shares restored %s after", time.Since(back).Round(time.Millisecond))
	ok, failed, last := l.end()
	if failed > 0 || ok == 0 {
		t.Errorf("a's app: %d of %d requests failed while b was away (last: %v)", failed, ok+failed, last)
	}
}

// TestMultiClusterControllerDown: with ebb-federation stopped, load in a
// and in b is still scaled locally, each within its last bounds (max 3).
func TestMultiClusterControllerDown(t *testing.T) {
	ctx := t.Context()
	ns, name := "mc-hubdown", "mc-hubdown"
	apps := deployBoth(t, ns, name, install.Scaling{Max: 6, PollingInterval: 1, Cooldown: 5, TargetConcurrency: 1, HPABehavior: fastHPA})
	createFederatedScale(t, ns, name, 0, 6, stabilization, unreachable)
	for _, m := range []member{a, b} {
		waitBounds(t, m, ns, name, 0, 3, 30*time.Second)
	}
	fed := a.ebb.Fullname + "-federation"
	setReplicas := func(ctx context.Context, n int32) error { return install.Scale(ctx, a.c, a.ebb.Namespace, fed, n) }
	if err := setReplicas(ctx, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		if err := setReplicas(ctx, 1); err != nil {
			t.Errorf("scale %s back: %v", fed, err)
		}
		if err := install.WaitDeploymentReady(ctx, a.c, a.ebb.Namespace, fed, 2*time.Minute); err != nil {
			t.Error(err)
		}
	})
	if err := cluster.WaitFor(ctx, time.Minute, "no pod of "+fed, func(ctx context.Context) (bool, error) {
		pods, err := a.c.Client.CoreV1().Pods(a.ebb.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=federation"})
		return err == nil && len(pods.Items) == 0, nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, m := range []member{a, b} {
		l := startLoad(ctx, apps[m.name], 8, time.Second)
		if err := m.c.WaitReplicas(ctx, ns, name, 3, 90*time.Second); err != nil {
			l.end()
			t.Fatalf("cluster %s under load without the controller: %v", m.name, err)
		}
		// It stays within its last max: nobody moves headroom now.
		for i := 0; i < 25; i++ {
			if r, err := replicas(ctx, m, ns, name); err != nil || r > 3 {
				t.Errorf("cluster %s: %d replicas (%v), above its last max 3", m.name, r, err)
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		ok, failed, last := l.end()
		if failed > 0 {
			t.Errorf("cluster %s: %d of %d requests failed (last: %v)", m.name, failed, ok+failed, last)
		}
		t.Logf("cluster %s scaled to 3 on its own, %d requests served", m.name, ok)
	}
}
