package scaler

import (
	"testing"
	"time"

	"github.com/ebb-dev/ebb/internal/testwait"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
)

func (r *rig) status(app string) AppStatus {
	r.t.Helper()
	k := appKey{Namespace: ns, Name: app}
	a := r.s.reg.lookup(k)
	if a == nil {
		r.t.Fatalf("app %s unknown to the scaler", k)
	}
	now := time.Now()
	return r.s.appStatus(k, a.figures(now, time.Minute), now, time.Minute)
}

func (r *rig) metricValue(name string) float64 {
	r.t.Helper()
	mfs, err := r.s.prom.Gather()
	if err != nil {
		r.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			m := mf.GetMetric()[0]
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	r.t.Fatalf("no metric %s", name)
	return 0
}

func TestCounting(t *testing.T) {
	type sidecars map[string]*sidecar
	for name, tc := range map[string]struct {
		// pods present when the scaler starts, by name; nil sidecar = bypassed
		before func(t *testing.T) (sidecars, []*corev1.Pod)
		run    func(t *testing.T, r *rig, sc sidecars)
		want   AppStatus
		// metric counters expected after run
		metrics map[string]float64
	}{
		"in flight is summed over every pod": {
			before: func(t *testing.T) (sidecars, []*corev1.Pod) {
				sc := sidecars{"a": newSidecar(t, 3, 0, 1), "b": newSidecar(t, 4, 0, 1), "other": newSidecar(t, 50, 0, 1)}
				return sc, []*corev1.Pod{appPod("hello-a", "hello", sc["a"]), appPod("hello-b", "hello", sc["b"]), appPod("other-0", "other", sc["other"])}
			},
			run:  func(*testing.T, *rig, sidecars) {},
			want: AppStatus{Concurrency: 7, InFlight: 7, Pods: 2, ReadyPods: 2, Active: true},
		},
		"requests shorter than a tick are seen through the counter": {
			before: func(t *testing.T) (sidecars, []*corev1.Pod) {
				sc := sidecars{"a": newSidecar(t, 0, 1000, 1)}
				return sc, []*corev1.Pod{appPod("hello-a", "hello", sc["a"])}
			},
			run: func(t *testing.T, r *rig, sc sidecars) {
				sc["a"].set(0, 1005, 1) // five requests came and went between two ticks
				r.tick()
			},
			want: AppStatus{RequestsCounted: 5, Pods: 1, ReadyPods: 1, Active: true},
		},
		"a sidecar restart is a reset, not a negative delta": {
			before: func(t *testing.T) (sidecars, []*corev1.Pod) {
				sc := sidecars{"a": newSidecar(t, 0, 1000, 1)}
				return sc, []*corev1.Pod{appPod("hello-a", "hello", sc["a"])}
			},
			run: func(t *testing.T, r *rig, sc sidecars) {
				sc["a"].set(1, 3, 2)
				r.tick()
				sc["a"].set(0, 10, 2)
				r.tick()
			},
			want: AppStatus{RequestsCounted: 10, Pods: 1, ReadyPods: 1, Active: true},
		},
		"a pod that vanishes stops counting": {
			before: func(t *testing.T) (sidecars, []*corev1.Pod) {
				sc := sidecars{"a": newSidecar(t, 3, 0, 1), "b": newSidecar(t, 4, 0, 1)}
				return sc, []*corev1.Pod{appPod("hello-a", "hello", sc["a"]), appPod("hello-b", "hello", sc["b"])}
			},
			run: func(t *testing.T, r *rig, sc sidecars) {
				r.deletePod("hello-b")
				r.tick()
			},
			want: AppStatus{Concurrency: 3, InFlight: 3, Pods: 1, ReadyPods: 1, Active: true},
		},
		"a pod that stops answering keeps its value for stale-ticks, then is dropped": {
			before: func(t *testing.T) (sidecars, []*corev1.Pod) {
				sc := sidecars{"a": newSidecar(t, 5, 0, 1), "b": newSidecar(t, 1, 0, 1)}
				return sc, []*corev1.Pod{appPod("hello-a", "hello", sc["a"]), appPod("hello-b", "hello", sc["b"])}
			},
			run: func(t *testing.T, r *rig, sc sidecars) {
				sc["a"].srv.Close()
				for range 2 { // StaleTicks = 2
					r.tick()
					if got := r.status("hello"); got.InFlight != 6 || got.StalePods != 1 {
						t.Fatalf("while stale: in flight %d, stale pods %d; want 6 and 1", got.InFlight, got.StalePods)
					}
				}
				r.tick()
			},
			want:    AppStatus{Concurrency: 1, InFlight: 1, Pods: 2, ReadyPods: 2, DroppedPods: 1, Active: true},
			metrics: map[string]float64{metricDropped: 1, metricReadErrors: 3},
		},
		"a pod without sidecar keeps the app active": {
			before: func(t *testing.T) (sidecars, []*corev1.Pod) {
				sc := sidecars{"a": newSidecar(t, 0, 0, 1)}
				return sc, []*corev1.Pod{appPod("hello-a", "hello", sc["a"]), appPod("hello-legacy", "hello", nil)}
			},
			run:     func(*testing.T, *rig, sidecars) {},
			want:    AppStatus{Pods: 1, ReadyPods: 1, BypassedPods: 1, Active: true},
			metrics: map[string]float64{metricBypassedSeen: 1},
		},
		"a pod serving before the scaler started is a baseline": {
			before: func(t *testing.T) (sidecars, []*corev1.Pod) {
				sc := sidecars{"a": newSidecar(t, 0, 1000, 1)}
				return sc, []*corev1.Pod{appPod("hello-a", "hello", sc["a"])}
			},
			run:  func(t *testing.T, r *rig, _ sidecars) { r.tick() },
			want: AppStatus{Pods: 1, ReadyPods: 1},
		},
		"a pod created later counts from zero (the activator's forwarded requests)": {
			before: func(t *testing.T) (sidecars, []*corev1.Pod) { return sidecars{}, nil },
			run: func(t *testing.T, r *rig, _ sidecars) {
				r.addPod(appPod("hello-new", "hello", newSidecar(t, 0, 4, 9)))
				r.tick()
			},
			want: AppStatus{RequestsCounted: 4, Pods: 1, ReadyPods: 1, Active: true},
		},
		"a pending pod is not read; once running it counts from zero": {
			before: func(t *testing.T) (sidecars, []*corev1.Pod) {
				sc := sidecars{"a": newSidecar(t, 0, 2, 1)}
				p := appPod("hello-a", "hello", sc["a"])
				p.Status = corev1.PodStatus{Phase: corev1.PodPending}
				return sc, []*corev1.Pod{p}
			},
			run: func(t *testing.T, r *rig, sc sidecars) {
				if got := r.status("hello"); got.Pods != 0 {
					t.Fatalf("pending pod read: %+v", got)
				}
				p := appPod("hello-a", "hello", sc["a"])
				if _, err := r.client.CoreV1().Pods(ns).UpdateStatus(t.Context(), p, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
				testwait.For(t, 10*time.Second, "pod running", func() bool { return len(r.s.reg.readable()) == 1 })
				r.tick()
			},
			want: AppStatus{RequestsCounted: 2, Pods: 1, ReadyPods: 1, Active: true},
		},
		"a running pod that is not ready is read": {
			before: func(t *testing.T) (sidecars, []*corev1.Pod) {
				sc := sidecars{"a": newSidecar(t, 2, 0, 1)}
				p := appPod("hello-a", "hello", sc["a"])
				p.Status.Conditions = nil
				return sc, []*corev1.Pod{p}
			},
			run:  func(*testing.T, *rig, sidecars) {},
			want: AppStatus{Concurrency: 2, InFlight: 2, Pods: 1, Active: true},
		},
	} {
		t.Run(name, func(t *testing.T) {
			sc, pods := tc.before(t)
			objs := make([]runtime.Object, len(pods))
			for i, p := range pods {
				objs[i] = p
			}
			r := newRig(t, fake.NewClientset(objs...), nil)
			tc.run(t, r, sc)
			tc.want.Namespace, tc.want.App, tc.want.Window = ns, "hello", "1m0s"
			if diff := cmp.Diff(tc.want, r.status("hello"), cmpopts.IgnoreFields(AppStatus{}, "RatePerSecond", "Idle", "BusyFor"), cmpopts.IgnoreUnexported(AppStatus{})); diff != "" {
				t.Errorf("hello (-want +got):\n%s", diff)
			}
			for m, want := range tc.metrics {
				if got := r.metricValue(m); got != want {
					t.Errorf("%s = %v, want %v", m, got, want)
				}
			}
		})
	}
}

// TestColdStartsCountedOnce: a cold start is counted when held requests
// appear for an app with no ready pod, once, however many activators hold
// (the holdpush server sums them before setHeld) and however the held count
// moves; held requests for an app with a ready pod are no cold start.
func TestColdStartsCountedOnce(t *testing.T) {
	r := newRegistry()
	k := appKey{Namespace: "shop", Name: "hello"}
	now := time.Now()
	coldStarts := func() uint64 { return r.lookup(k).figures(now, time.Minute).coldStarts }
	for _, held := range []int64{1, 3, 5, 2} { // one cold start, two activators joining and leaving
		r.setHeld(k, held, now)
	}
	if n := coldStarts(); n != 1 {
		t.Fatalf("%d cold starts after one, want 1", n)
	}
	r.setHeld(k, 0, now)
	r.setHeld(k, 4, now)
	if n := coldStarts(); n != 2 {
		t.Fatalf("%d cold starts after two, want 2", n)
	}
	r.setHeld(k, 0, now)
	r.lookup(k).readyPods = 1
	r.setHeld(k, 1, now) // a pod is ready: held only while it is found
	if n := coldStarts(); n != 2 {
		t.Errorf("%d cold starts, want 2: held requests for an app with a ready pod counted", n)
	}
}
