package install

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/ebb-dev/ebb/test/cluster"
)

// Timeline records when a cold start's steps were first seen, as the
// cluster tells them: the Deployment's replicas written by KEDA, the pod's
// creation and Ready (on watches), the app's process start and first
// answer (polled on its own port), and the
// scaler's count of held requests (its /apps status, read every 10 ms).
type Timeline struct {
	mu     sync.Mutex
	events map[string]time.Time
	stop   context.CancelFunc
	done   sync.WaitGroup
}

// Timeline event names.
const (
	EventFirstRequest  = "first request sent"
	EventScalerHeld    = "scaler counts the held requests"
	EventReplicas1     = "KEDA sets replicas=1"
	EventPodCreated    = "pod created (sidecar injected)"
	EventAppRunning    = "app process started (its X-App-Started)"
	EventAppAnswers    = "app answers /healthz on its own port"
	EventPodReady      = "pod ready"
	EventFirstResponse = "first response (200)"
	EventLastResponse  = "last response"
)

// WatchColdStart starts recording the cold start of app a; Stop ends it.
func (r *Release) WatchColdStart(ctx context.Context, c *cluster.Cluster, a *AppAtZero) *Timeline {
	ctx, cancel := context.WithCancel(ctx)
	t := &Timeline{events: map[string]time.Time{}, stop: cancel}
	t.done.Add(3)
	go func() {
		defer t.done.Done()
		w, err := c.Client.AppsV1().Deployments(a.Namespace).Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", a.Name).String()})
		if err != nil {
			return
		}
		defer w.Stop()
		for ev := range w.ResultChan() {
			if d, ok := ev.Object.(*appsv1.Deployment); ok && d.Spec.Replicas != nil && *d.Spec.Replicas >= 1 {
				t.Mark(EventReplicas1)
			}
		}
	}()
	go func() {
		defer t.done.Done()
		w, err := c.Client.CoreV1().Pods(a.Namespace).Watch(ctx, metav1.ListOptions{LabelSelector: r.Names.AppLabel() + "=" + a.Name})
		if err != nil {
			return
		}
		defer w.Stop()
		polling := false
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			t.Mark(EventPodCreated)
			if p.Status.PodIP != "" && !polling {
				polling = true
				t.done.Add(1)
				go func() {
					defer t.done.Done()
					pollApp(ctx, p.Status.PodIP, t)
				}()
			}
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
					t.Mark(EventPodReady)
				}
			}
		}
	}()
	go func() {
		defer t.done.Done()
		r.pollScalers(ctx, c, a, t)
	}()
	return t
}

// pollApp asks the app container itself (its port, not the sidecar's:
// uncounted) for its readiness path every 5 ms until it answers 200, and
// takes when its process started from the answer: the kubelet reports a
// container running only in its next status update, often after the app
// already answers.
func pollApp(ctx context.Context, podIP string, t *Timeline) {
	client := &http.Client{Timeout: 200 * time.Millisecond, Transport: &http.Transport{DisableKeepAlives: true}}
	url := fmt.Sprintf("http://%s:%d/healthz", podIP, AppPort)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if resp, err := client.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				t.Mark(EventAppAnswers)
				if at, err := time.Parse(time.RFC3339Nano, resp.Header.Get("X-App-Started")); err == nil {
					t.MarkAt(EventAppRunning, at)
				}
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// pollScalers reads every scaler pod's status of the app until one counts
// a held request.
func (r *Release) pollScalers(ctx context.Context, c *cluster.Cluster, a *AppAtZero, t *Timeline) {
	pods, err := c.Client.CoreV1().Pods(r.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=ebb-scaler,app.kubernetes.io/instance=" + r.Name})
	if err != nil {
		return
	}
	client := &http.Client{Timeout: 500 * time.Millisecond}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		for _, p := range pods.Items {
			if p.Status.PodIP == "" {
				continue
			}
			resp, err := client.Get(fmt.Sprintf("http://%s:8080/apps/%s/%s", p.Status.PodIP, a.Namespace, a.Name))
			if err != nil {
				continue
			}
			var st struct {
				Held int64 `json:"held"`
			}
			err = json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
			if err == nil && st.Held > 0 {
				t.Mark(EventScalerHeld)
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Mark records the first time of an event.
func (t *Timeline) Mark(event string) { t.MarkAt(event, time.Now()) }

// MarkAt records an event's time unless an earlier one is recorded.
func (t *Timeline) MarkAt(event string, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if old, ok := t.events[event]; !ok || at.Before(old) {
		t.events[event] = at
	}
}

// Stop ends the recording.
func (t *Timeline) Stop() {
	t.stop()
	t.done.Wait()
}

// At is the time of an event and whether it was seen.
func (t *Timeline) At(event string) (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	at, ok := t.events[event]
	return at, ok
}

// Since is the time from one event to another, if both were seen.
func (t *Timeline) Since(from, to string) (time.Duration, bool) {
	a, ok1 := t.At(from)
	b, ok2 := t.At(to)
	return b.Sub(a), ok1 && ok2
}

// String prints the events in order, each as an offset from the first.
func (t *Timeline) String() string {
	t.mu.Lock()
	type ev struct {
		name string
		at   time.Time
	}
	var evs []ev
	for n, at := range t.events {
		evs = append(evs, ev{n, at})
	}
	t.mu.Unlock()
	sort.Slice(evs, func(i, j int) bool { return evs[i].at.Before(evs[j].at) })
	var b strings.Builder
	for _, e := range evs {
		fmt.Fprintf(&b, "  %s  +%7.3fs  %s\n", e.at.Format("15:04:05.000"), e.at.Sub(evs[0].at).Seconds(), e.name)
	}
	return b.String()
}
