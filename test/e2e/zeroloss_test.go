package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ebb-dev/ebb/test/cluster"
	"github.com/ebb-dev/ebb/test/e2e/install"
)

// TestZeroLossUnderChange: steady traffic through the
// Service's ClusterIP while the app goes 0→1→N→1→0, N set by the HPA that
// KEDA creates, fed by KEDA's metrics adapter with the scaler's in-flight
// sum. Not one steady request may fail:
//
//   - steady: one request every 50 ms from start to end (held by the
//     activator at 0, then served by however many pods there are);
//   - burst: 8 more clients looping on a 300 ms request push in-flight to
//     about 8, so the HPA (target 2 per pod) scales to N ≥ 2;
//   - calm: the burst stops, the HPA takes the app back to 1;
//   - quiet: steady traffic pauses until KEDA sets replicas to 0, then
//     resumes at once, so its first requests land on the last pod while it
//     drains, or on the activator, which wakes the app again.
func TestZeroLossUnderChange(t *testing.T) {
	ctx := t.Context()
	fast := map[string]any{"stabilizationWindowSeconds": int64(3), "policies": []any{map[string]any{"type": "Percent", "value": int64(100), "periodSeconds": int64(1)}}}
	s := install.Scaling{Max: 3, PollingInterval: 1, Cooldown: 5, TargetConcurrency: 2, RateWindow: "3s",
		HPABehavior: map[string]any{"scaleUp": fast, "scaleDown": fast}}
	a, err := ebb.DeployAtZero(ctx, lc, "e2e-change", "change", s, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	var tl timeline
	tl.mark(begin, "at zero; steady traffic starts")
	var most atomic.Int32
	stopReplicas := watchReplicas(ctx, a, &tl, &most)
	defer stopReplicas()

	client := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	var (
		mu      sync.Mutex
		results []install.Result
		paused  atomic.Bool
		stop    = make(chan struct{})
		steady  sync.WaitGroup
	)
	record := func(r install.Result) {
		mu.Lock()
		results = append(results, r)
		mu.Unlock()
	}
	// The steady loop: bounded by count (at most 2,400 requests) and by stop.
	steady.Add(1)
	go func() {
		defer steady.Done()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		var inner sync.WaitGroup
		defer inner.Wait()
		for range 2400 {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if paused.Load() {
				continue
			}
			inner.Add(1)
			go func() {
				defer inner.Done()
				record(install.Get(ctx, client, a.URL, a.Host))
			}()
		}
	}()
	fail := func(format string, args ...any) {
		close(stop)
		steady.Wait()
		t.Logf("timeline:\n%s", tl.String())
		t.Fatalf(format, args...)
	}

	// 0→1: the steady requests wake the app.
	if err := lc.WaitReplicas(ctx, a.Namespace, a.Name, 1, 60*time.Second); err != nil {
		fail("wake: %v", err)
	}
	// 1→N: a burst of slow requests.
	burstStop := make(chan struct{})
	var burst sync.WaitGroup
	var burstN atomic.Int64
	for range 8 {
		burst.Add(1)
		go func() {
			defer burst.Done()
			for range 400 { // 400 × 300 ms bounds a client to 2 min
				select {
				case <-burstStop:
					return
				default:
				}
				r := install.Get(ctx, client, a.URL+"?delay=300ms", a.Host)
				burstN.Add(1)
				record(r)
			}
		}()
	}
	tl.mark(time.Now(), "burst starts: 8 clients looping on 300 ms requests")
	if err := waitReplicasAtLeast(ctx, a, 2, 90*time.Second); err != nil {
		close(burstStop)
		burst.Wait()
		fail("HPA scale-up: %v", err)
	}
	// Let the N pods serve a while.
	time.Sleep(5 * time.Second)
	close(burstStop)
	burst.Wait()
	n := most.Load()
	tl.mark(time.Now(), fmt.Sprintf("burst stops (%d burst requests; the HPA reached %d replicas)", burstN.Load(), n))

	// N→1: the HPA takes it back to its minimum, steady traffic going on.
	if err := lc.WaitReplicas(ctx, a.Namespace, a.Name, 1, 90*time.Second); err != nil {
		fail("HPA scale-down: %v", err)
	}
	time.Sleep(2 * time.Second)
	// 1→0: steady traffic pauses until KEDA writes replicas=0, then resumes.
	paused.Store(true)
	tl.mark(time.Now(), "steady traffic pauses")
	if err := lc.WaitReplicas(ctx, a.Namespace, a.Name, 0, 90*time.Second); err != nil {
		fail("scale to zero: %v", err)
	}
	paused.Store(false)
	tl.mark(time.Now(), "steady traffic resumes")
	time.Sleep(5 * time.Second)
	close(stop)
	steady.Wait()
	tl.mark(time.Now(), "steady traffic stops")

	byStatus := map[string]int{}
	for _, r := range results {
		switch {
		case r.Err != nil:
			byStatus["error"]++
		default:
			byStatus[fmt.Sprint(r.Status)]++
		}
	}
	t.Logf("timeline:\n%s", tl.String())
	t.Logf("requests: %d in all, by outcome %v", len(results), byStatus)
	failed := install.Failures(results)
	lost := len(results) - byStatus["200"]
	fmt.Printf("FIGURE zero loss (0→1→%d→1→0 under steady traffic): requests lost %d of %d\n", n, lost, len(results))
	if failed != nil {
		t.Errorf("not 200 while the app went 0→1→N→1→0:\n%v", failed)
	}
	if n < 2 {
		t.Errorf("the HPA reached %d replicas, want N ≥ 2", n)
	}
}

// timeline is a list of timed events, safe for concurrent use.
type timeline struct {
	mu     sync.Mutex
	begin  time.Time
	events []string
}

func (tl *timeline) mark(at time.Time, what string) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if tl.begin.IsZero() {
		tl.begin = at
	}
	tl.events = append(tl.events, fmt.Sprintf("%+8.2fs  %s", at.Sub(tl.begin).Seconds(), what))
}

func (tl *timeline) String() string {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return strings.Join(tl.events, "\n")
}

// watchReplicas marks every change of the app's Deployment's replicas (spec
// and ready) on tl until the returned func is called.
// most is raised to the most replicas seen.
func watchReplicas(ctx context.Context, a *install.AppAtZero, tl *timeline, most *atomic.Int32) func() {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		last := ""
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			d, err := lc.Client.AppsV1().Deployments(a.Namespace).Get(ctx, a.Name, metav1.GetOptions{})
			if err == nil && d.Spec.Replicas != nil {
				now := fmt.Sprintf("replicas %d, ready %d", *d.Spec.Replicas, d.Status.ReadyReplicas)
				if *d.Spec.Replicas > most.Load() {
					most.Store(*d.Spec.Replicas)
				}
				if now != last {
					tl.mark(time.Now(), now)
					last = now
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() { cancel(); <-done }
}

// waitReplicasAtLeast waits until the Deployment asks for at least n
// replicas.
func waitReplicasAtLeast(ctx context.Context, a *install.AppAtZero, n int32, timeout time.Duration) error {
	return cluster.WaitFor(ctx, timeout, fmt.Sprintf("%s/%s at %d replicas or more", a.Namespace, a.Name, n), func(ctx context.Context) (bool, error) {
		d, err := lc.Client.AppsV1().Deployments(a.Namespace).Get(ctx, a.Name, metav1.GetOptions{})
		return err == nil && d.Spec.Replicas != nil && *d.Spec.Replicas >= n, err
	})
}
