package scaler

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/testwait"
)

// createRoute creates k's namespace if need be and its AppRoute, whose
// spec.wakes names wakes, as the webhook writes it.
func createRoute(t *testing.T, cfg *rest.Config, k appKey, wakes ...appKey) {
	t.Helper()
	kube := kubernetes.NewForConfigOrDie(cfg)
	if _, err := kube.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: k.Namespace}}, metav1.CreateOptions{}); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	var ws []any
	for _, w := range wakes {
		ws = append(ws, map[string]any{"app": w.Name, "namespace": w.Namespace})
	}
	spec := map[string]any{
		"appPort":        int64(8080),
		"scaleTargetRef": map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "name": k.Name},
	}
	if len(ws) > 0 {
		spec["wakes"] = ws
	}
	_, err := dynamic.NewForConfigOrDie(cfg).Resource(routingv1alpha1.GroupVersionResource(routingv1alpha1.DefaultGroup)).Namespace(k.Namespace).Create(t.Context(), &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": routingv1alpha1.GroupVersion(routingv1alpha1.DefaultGroup).String(),
		"kind":       routingv1alpha1.Kind,
		"metadata":   map[string]any{"name": k.Name, "namespace": k.Namespace},
		"spec":       spec,
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// idleCondition returns k's Idle condition, or nil.
func idleCondition(t *testing.T, dyn dynamic.Interface, k appKey) *metav1.Condition {
	t.Helper()
	u, err := dyn.Resource(routingv1alpha1.GroupVersionResource(routingv1alpha1.DefaultGroup)).Namespace(k.Namespace).Get(t.Context(), k.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == routingv1alpha1.ConditionIdle {
			return &metav1.Condition{Status: metav1.ConditionStatus(m["status"].(string)), Reason: m["reason"].(string), Message: m["message"].(string)}
		}
	}
	return nil
}

// wantIdle waits for k's Idle condition to have status and reason and a
// message with contains.
func wantIdle(t *testing.T, dyn dynamic.Interface, k appKey, status metav1.ConditionStatus, reason, contains string) {
	t.Helper()
	var got *metav1.Condition
	if !poll(20*time.Second, func() bool {
		got = idleCondition(t, dyn, k)
		return got != nil && got.Status == status && got.Reason == reason && strings.Contains(got.Message, contains)
	}) {
		t.Fatalf("%s: Idle condition %+v, want %s %s with %q", k, got, status, reason, contains)
	}
	t.Logf("%s: Idle=%s %s: %s", k, got.Status, got.Reason, got.Message)
}

// TestDependentsKeepTheirDependenciesUp: a chain shop/frontend → shop/api
// → data/db (another namespace), all at zero, is idle; a live pod of
// frontend keeps api active (IsActive and StreamIsActive, Idle False
// NeededByDependents naming frontend), and not db, which api's pod keeps
// active in turn; once frontend's pod is terminating, api is idle again
// while db stays up for api; once api's pod is gone, db is idle.
func TestDependentsKeepTheirDependenciesUp(t *testing.T) {
	cfg := fleetAPI(t)
	frontend, api, db := appKey{Namespace: "shop", Name: "frontend"}, appKey{Namespace: "shop", Name: "api"}, appKey{Namespace: "data", Name: "db"}
	createRoute(t, cfg, frontend, api)
	createRoute(t, cfg, api, db)
	createRoute(t, cfg, db)
	var c apiCounter
	_, es := startFleetScaler(t, cfg, &c, 50, 100)
	kube := kubernetes.NewForConfigOrDie(cfg)
	dyn := dynamic.NewForConfigOrDie(cfg)
	ctx := t.Context()

	active := func(k appKey) bool {
		t.Helper()
		r, err := es.IsActive(ctx, fleetRef(k))
		if err != nil {
			t.Fatalf("IsActive %s: %v", k, err)
		}
		return r.Result
	}
	wantActive := func(k appKey, want bool) {
		t.Helper()
		if !poll(10*time.Second, func() bool { return active(k) == want }) {
			t.Fatalf("IsActive %s = %v, want %v", k, !want, want)
		}
	}
	for _, k := range []appKey{frontend, api, db} {
		if active(k) {
			t.Fatalf("%s active with every app of the chain at zero", k)
		}
	}
	wantIdle(t, dyn, api, metav1.ConditionTrue, ReasonNoRequests, "")

	// KEDA's stream for api: it must hear the change without asking.
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := es.StreamIsActive(sctx, fleetRef(api))
	if err != nil {
		t.Fatal(err)
	}
	streamed := make(chan bool, 16)
	go func() {
		for {
			r, err := stream.Recv()
			if err != nil {
				close(streamed)
				return
			}
			streamed <- r.Result
		}
	}()
	wantStreamed := func(want bool) {
		t.Helper()
		select {
		case got := <-streamed:
			if got != want {
				t.Fatalf("StreamIsActive(api) sent %v, want %v", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("StreamIsActive(api) sent nothing in 10s, want %v", want)
		}
	}
	wantStreamed(false)

	// A pod of frontend, its sidecar counting no request: frontend's own
	// figures say idle, but it is up, and it needs api.
	sc := newSidecar(t, 0, 0, 1)
	fp := appPod("frontend-1", frontend.Name, sc)
	fp.Finalizers = []string{"test.ebb.dev/hold"} // terminating, not gone, once deleted
	createPod(t, kube, fp)
	t.Cleanup(func() {
		p, err := kube.CoreV1().Pods(ns).Get(context.Background(), fp.Name, metav1.GetOptions{})
		if err == nil {
			p.Finalizers = nil
			_, _ = kube.CoreV1().Pods(ns).Update(context.Background(), p, metav1.UpdateOptions{})
		}
	})
	wantActive(api, true)
	wantStreamed(true)
	if active(db) {
		t.Error("db active while api, which needs it, has no pod")
	}
	if active(frontend) {
		t.Error("frontend active: nothing needs it and it counts no request")
	}
	wantIdle(t, dyn, api, metav1.ConditionFalse, ReasonNeededByDependents, "kept up by shop/frontend, which needs it (1 live pod)")

	// A pod of api, still Pending: live, so db (another namespace) is kept.
	ap := appPod("api-1", api.Name, nil)
	ap.Status = corev1.PodStatus{}
	createPod(t, kube, ap)
	wantActive(db, true)
	wantIdle(t, dyn, db, metav1.ConditionFalse, ReasonNeededByDependents, "kept up by shop/api, which needs it (1 live pod)")

	// frontend scaled to zero: its pod terminates (still Running). api is
	// no longer kept; db still is, by api.
	if err := kube.CoreV1().Pods(ns).Delete(ctx, fp.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	wantActive(api, false)
	wantStreamed(false)
	wantIdle(t, dyn, api, metav1.ConditionTrue, ReasonNoRequests, "")
	if !active(db) {
		t.Error("db idle while api, which needs it, has a live pod")
	}

	// api at zero: nothing keeps db.
	if err := kube.CoreV1().Pods(ns).Delete(ctx, ap.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	wantActive(db, false)
	wantIdle(t, dyn, db, metav1.ConditionTrue, ReasonNoRequests, "")
}

// createPod creates p and sets its status as the kubelet would (none:
// Pending).
func createPod(t *testing.T, kube kubernetes.Interface, p *corev1.Pod) {
	t.Helper()
	for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range cs {
			cs[i].Image = "ebb-test-app"
		}
	}
	st := p.Status
	got, err := kube.CoreV1().Pods(p.Namespace).Create(t.Context(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Phase == "" {
		return // Pending, as created
	}
	got.Status = st
	if _, err := kube.CoreV1().Pods(p.Namespace).UpdateStatus(t.Context(), got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestDependencyCycleKeepsNothingUp: two apps that wake each other (a
// cycle admission refuses, left by two RoutePolicy edits) do not keep each
// other up for good: a live pod of one does not make the other active.
func TestDependencyCycleKeepsNothingUp(t *testing.T) {
	cfg := fleetAPI(t)
	a, b := appKey{Namespace: "shop", Name: "a"}, appKey{Namespace: "shop", Name: "b"}
	createRoute(t, cfg, a, b)
	createRoute(t, cfg, b, a)
	var c apiCounter
	s, es := startFleetScaler(t, cfg, &c, 50, 100)
	kube := kubernetes.NewForConfigOrDie(cfg)
	createPod(t, kube, appPod("a-1", a.Name, newSidecar(t, 0, 0, 1)))
	createPod(t, kube, appPod("b-1", b.Name, newSidecar(t, 0, 0, 1)))
	testwait.For(t, 10*time.Second, "both pods live in the registry", func() bool { return s.reg.livePods(a) == 1 && s.reg.livePods(b) == 1 })
	time.Sleep(time.Second) // a tick: their sidecars read, counting nothing
	for _, k := range []appKey{a, b} {
		r, err := es.IsActive(t.Context(), fleetRef(k))
		if err != nil {
			t.Fatal(err)
		}
		if r.Result {
			t.Errorf("%s active: the apps of a cycle keep each other up", k)
		}
	}
}

// poll reports whether cond held within timeout (checked every 50ms).
func poll(timeout time.Duration, cond func() bool) bool {
	for end := time.Now().Add(timeout); ; time.Sleep(50 * time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(end) {
			return false
		}
	}
}

// TestIdleSaysAnotherTriggerKeepsTheAppUp: warm hours. The ScaledObject
// that asks about hello has ebb's trigger and KEDA's cron trigger; ebb
// sees no request. While KEDA holds the ScaledObject Active (the cron
// window), Idle is True KeptUpByAnotherTrigger naming the ScaledObject and
// cron, and ebb still answers inactive (KEDA combines the triggers); when
// KEDA sets Active False (outside the window), Idle is NoRequests. A
// ScaledObject Active with ebb's trigger alone is NoRequests too.
func TestIdleSaysAnotherTriggerKeepsTheAppUp(t *testing.T) {
	cfg := fleetAPI(t)
	hello, solo := appKey{Namespace: "shop", Name: "hello"}, appKey{Namespace: "shop", Name: "solo"}
	createRoute(t, cfg, hello)
	createRoute(t, cfg, solo)
	dyn := dynamic.NewForConfigOrDie(cfg)
	ebb := map[string]any{"type": "external-push", "metadata": map[string]any{"scalerAddress": "ebb-scaler.ebb-system:9090", "app": "", "targetConcurrency": "10"}}
	cron := map[string]any{"type": "cron", "metadata": map[string]any{"timezone": "Europe/Paris", "start": "0 8 * * 1-5", "end": "0 19 * * 1-5", "desiredReplicas": "1"}}
	so := func(k appKey, triggers ...map[string]any) {
		t.Helper()
		var ts []any
		for _, tr := range triggers {
			md := map[string]any{}
			for key, v := range tr["metadata"].(map[string]any) {
				md[key] = v
			}
			if _, ok := md["app"]; ok {
				md["app"] = k.Name
			}
			ts = append(ts, map[string]any{"type": tr["type"], "metadata": md})
		}
		_, err := dyn.Resource(scaledObjects).Namespace(k.Namespace).Create(t.Context(), &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
			"metadata": map[string]any{"name": k.Name, "namespace": k.Namespace},
			"spec":     map[string]any{"scaleTargetRef": map[string]any{"name": k.Name}, "minReplicaCount": int64(0), "triggers": ts},
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	// setActive writes the Active condition as KEDA's operator does.
	setActive := func(k appKey, status metav1.ConditionStatus) {
		t.Helper()
		u, err := dyn.Resource(scaledObjects).Namespace(k.Namespace).Get(t.Context(), k.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_ = unstructured.SetNestedSlice(u.Object, []any{
			map[string]any{"type": "Ready", "status": "True", "reason": "ScaledObjectReady", "message": "ScaledObject is defined correctly and is ready for scaling"},
			map[string]any{"type": "Active", "status": string(status), "reason": "ScalerActive", "message": "Scaling is performed because triggers are active"},
		}, "status", "conditions")
		if _, err := dyn.Resource(scaledObjects).Namespace(k.Namespace).UpdateStatus(t.Context(), u, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	so(hello, ebb, cron)
	so(solo, ebb)
	setActive(hello, metav1.ConditionTrue)
	setActive(solo, metav1.ConditionTrue)

	var c apiCounter
	_, es := startFleetScaler(t, cfg, &c, 50, 100)
	ctx, stop := context.WithCancel(t.Context())
	asking := make(chan struct{})
	defer func() { stop(); <-asking }()
	go func() { // KEDA asks every polling interval
		defer close(asking)
		for ctx.Err() == nil {
			for _, k := range []appKey{hello, solo} {
				if r, err := es.IsActive(ctx, fleetRef(k)); err == nil && r.Result {
					t.Errorf("IsActive %s = true with no request: ebb must not answer for another trigger", k)
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()
	wantIdle(t, dyn, hello, metav1.ConditionTrue, ReasonKeptUpByAnotherTrigger, "ebb sees no requests; the ScaledObject hello keeps the app up through another trigger (cron).")
	wantIdle(t, dyn, solo, metav1.ConditionTrue, ReasonNoRequests, "")

	// Outside the window.
	setActive(hello, metav1.ConditionFalse)
	wantIdle(t, dyn, hello, metav1.ConditionTrue, ReasonNoRequests, "")

	// Idle: nothing more is asked of the API server (the watch is open).
	time.Sleep(2 * time.Second)
	c.count()
	time.Sleep(3 * time.Second)
	if got := c.stop(); len(got) != 0 {
		t.Errorf("while idle, asked every 200ms, the scaler sent the API server %d request(s), want none: %q", len(got), got)
	}
}
