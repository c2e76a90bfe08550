package scaler_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/scaler"
	"github.com/ebb-dev/ebb/test/cluster"
	"github.com/ebb-dev/ebb/test/fixtures"
)

// hostile is a pod that carries an app's label and poses as its ebb
// sidecar (a container named ebb-sidecar with a port named ebb-admin), as
// any namespace's user can make one: the test app in --hostile-stats mode.
type hostile struct {
	mode    string
	event   string // the Warning event that names the pod
	reason  string // in the event's note
	refused bool   // the app's figure from this pod is refused (refusedPods)
}

var hostiles = []hostile{
	{"huge", scaler.ReasonStatsRefused, "too_long", false},
	{"huge-chunked", scaler.ReasonStatsRefused, "too_long", false},
	{"endless-head", scaler.ReasonStatsRefused, "too_long", false},
	{"garbage", scaler.ReasonStatsRefused, "http", false},
	{"slow", scaler.ReasonStatsSlow, "", false},
	{"never", scaler.ReasonStatsSlow, "", false},
	{"inflight-negative", scaler.ReasonStatsRefused, "format", false},
	{"inflight-max", scaler.ReasonStatsRefused, "in_flight", true},
	{"inflight-absurd", scaler.ReasonStatsRefused, "in_flight", true},
	{"counter-backwards", scaler.ReasonStatsRefused, "counter_backwards", true},
	{"boot-churn", scaler.ReasonStatsRefused, "boot_churn", true},
}

func hostilePod(names groupsuffix.Names, ns string, h hostile) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "forged-" + h.mode, Namespace: ns, Labels: map[string]string{names.AppLabel(): "forged-" + h.mode}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To(int64(1)),
			Containers: []corev1.Container{{
				Name:  scaler.SidecarContainer,
				Image: "ghcr.io/ebb-dev/ebb-test-app:dev",
				Args:  []string{"--listen=:8022", "--hostile-stats=" + h.mode},
				Ports: []corev1.ContainerPort{{Name: scaler.AdminPortName, ContainerPort: 8022}},
			}},
		},
	}
}

// TestHostilePods: pods in a namespace that answer the scaler's /stats
// read with 1 GiB, a 1 GiB chunk, an endless head, garbage, one byte a
// second, nothing, a negative, 2^63-1 or 4·10^9 in-flight figure, a counter
// going backwards or a new boot ID at every read cost the scaler's tick
// nothing after it first meets them (every tick stays as short as with
// well-behaved pods only), keep its heap bounded, leave the other apps'
// figures exact, have their forged figures refused, and are each named in
// a Warning event on the pod.
func TestHostilePods(t *testing.T) {
	ctx := t.Context()
	names := groupsuffix.MustNew(groupsuffix.Default)
	const ns = "scaler-hostile"
	if err := lc.EnsureNamespace(ctx, ns, nil); err != nil {
		t.Fatal(err)
	}
	s := startScaler(t)
	admin := s.AdminAddr().String()

	good := []string{"good-0", "good-1", "good-2"}
	for _, app := range good {
		if _, err := lc.Client.AppsV1().Deployments(ns).Create(ctx, fixtures.App(names, ns, app, 1), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := cluster.WaitFor(ctx, 120*time.Second, "the good apps' pods ready and read", func(context.Context) (bool, error) {
		for _, app := range good {
			if st, err := appStatus(admin, ns, app); err != nil || st.Pods != 1 || st.ReadyPods != 1 {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	heap := heapSampler()
	time.Sleep(2 * time.Second)
	start := scrapeTicks(t, admin)
	time.Sleep(10 * time.Second)
	created := scrapeTicks(t, admin)
	normal := created.minus(start)
	heapBefore := heap.max()

	for _, h := range hostiles {
		if _, err := lc.Client.CoreV1().Pods(ns).Create(ctx, hostilePod(names, ns, h), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	met := time.Now()
	if err := cluster.WaitFor(ctx, 90*time.Second, "the hostile pods running", func(ctx context.Context) (bool, error) {
		for _, h := range hostiles {
			p, err := lc.Client.CoreV1().Pods(ns).Get(ctx, "forged-"+h.mode, metav1.GetOptions{})
			if err != nil || p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	// Every hostile pod met and named in an event (boot-churn needs more
	// than 10 reads).
	for _, h := range hostiles {
		pod := "forged-" + h.mode
		var seen []string
		err := cluster.WaitFor(ctx, 40*time.Second, "a "+h.event+" event on pod "+pod, func(ctx context.Context) (bool, error) {
			evs, err := lc.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Pod,involvedObject.name=" + pod})
			if err != nil {
				return false, err
			}
			seen = seen[:0]
			for _, e := range evs.Items {
				seen = append(seen, e.Reason+": "+e.Message)
				if e.Reason == h.event && strings.Contains(e.Message, "app forged-"+h.mode) && strings.Contains(e.Message, h.reason) {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			t.Errorf("%v; events on the pod: %q", err, seen)
		}
	}
	metAll := scrapeTicks(t, admin)
	t.Logf("meeting the hostile pods (%s from their creation to the last event): %s", time.Since(met).Round(time.Second), metAll.minus(created))

	// From now on every tick is as short as before.
	time.Sleep(15 * time.Second)
	during := scrapeTicks(t, admin).minus(metAll)
	heapDuring := heap.max()
	heap.stop()
	t.Logf("ticks with the 3 good apps only: %s", normal)
	t.Logf("ticks with the 11 hostile pods too, once met: %s", during)
	t.Logf("test process heap in use: max %.1f MiB before, %.1f MiB with the hostile pods", mib(heapBefore), mib(heapDuring))
	if during.count < 10 || during.over(0.1) > 0 || during.mean() > max(3*normal.mean(), 0.02) {
		t.Errorf("ticks with the hostile pods: %s; without: %s", during, normal)
	}
	if heapDuring > heapBefore+64<<20 {
		t.Errorf("heap grew from %.1f to %.1f MiB", mib(heapBefore), mib(heapDuring))
	}

	for _, h := range hostiles {
		st, err := appStatus(admin, ns, "forged-"+h.mode)
		if err != nil {
			t.Fatal(err)
		}
		if st.InFlight != 0 || (st.RefusedPods == 1) != h.refused {
			t.Errorf("app forged-%s: in flight %d, refused pods %d; want 0, refused %v", h.mode, st.InFlight, st.RefusedPods, h.refused)
		}
	}
	for _, app := range good {
		st, err := appStatus(admin, ns, app)
		if err != nil {
			t.Fatal(err)
		}
		if st.Pods != 1 || st.StalePods != 0 || st.DroppedPods != 0 || st.RefusedPods != 0 || st.InFlight != 0 {
			t.Errorf("good app %s: %+v", app, st)
		}
	}
	if v := metricValue(t, admin, "ebb_scaler_sidecar_slow_pods"); v != 2 {
		t.Errorf("ebb_scaler_sidecar_slow_pods = %v, want 2 (slow, never)", v)
	}
}

// ticks is what the scaler's tick histogram recorded over a window.
type ticks struct {
	count, sum float64
	buckets    map[float64]float64 // le → count
}

func (w ticks) mean() float64 {
	if w.count == 0 {
		return 0
	}
	return w.sum / w.count
}

// over is how many ticks took longer than le (a bucket bound).
func (w ticks) over(le float64) float64 { return w.count - w.buckets[le] }

func (w ticks) String() string {
	return fmt.Sprintf("%.0f ticks, mean %.1f ms, %.0f over 10 ms, %.0f over 50 ms, %.0f over 100 ms, %.0f over 250 ms",
		w.count, 1000*w.mean(), w.over(0.01), w.over(0.05), w.over(0.1), w.over(0.25))
}

func (w ticks) minus(o ticks) ticks {
	d := ticks{count: w.count - o.count, sum: w.sum - o.sum, buckets: map[float64]float64{}}
	for le, n := range w.buckets {
		d.buckets[le] = n - o.buckets[le]
	}
	return d
}

func scrapeTicks(t *testing.T, admin string) ticks {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	w := ticks{buckets: map[float64]float64{}}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, rest, _ := strings.Cut(line, " ")
		if !strings.HasPrefix(name, "ebb_scaler_tick_duration_seconds") {
			continue
		}
		v, err := strconv.ParseFloat(rest, 64)
		if err != nil {
			continue
		}
		switch {
		case strings.HasPrefix(name, "ebb_scaler_tick_duration_seconds_count"):
			w.count = v
		case strings.HasPrefix(name, "ebb_scaler_tick_duration_seconds_sum"):
			w.sum = v
		case strings.Contains(name, `le="`):
			le := name[strings.Index(name, `le="`)+4:]
			le = le[:strings.IndexByte(le, '"')]
			if f, err := strconv.ParseFloat(le, 64); err == nil {
				w.buckets[f] = v
			}
		}
	}
	return w
}

func metricValue(t *testing.T, admin, metric string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		name, rest, _ := strings.Cut(sc.Text(), " ")
		if name == metric || strings.HasPrefix(name, metric+"{") {
			v, _ := strconv.ParseFloat(rest, 64)
			return v
		}
	}
	t.Fatalf("no %s in the scaler's /metrics", metric)
	return 0
}

// heapSampler samples the process's heap in use (the scaler runs in it)
// every 100 ms.
type heapSamples struct {
	done chan struct{}
	top  chan uint64
}

func heapSampler() *heapSamples {
	h := &heapSamples{done: make(chan struct{}), top: make(chan uint64)}
	go func() {
		var top uint64
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			top = max(top, ms.HeapInuse)
			select {
			case <-h.done:
				close(h.top)
				return
			case h.top <- top:
				top = 0 // a new span starts at each reading
			case <-t.C:
			}
		}
	}()
	return h
}

func (h *heapSamples) max() uint64 { return <-h.top }
func (h *heapSamples) stop()       { close(h.done) }

func mib(b uint64) float64 { return float64(b) / (1 << 20) }
