package control

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/groupsuffix"
)

// TestWriteBackoff: the waits between the writes of a slice that keep
// failing double from 1 s up to 30 s; each slice has its own, and holds
// only the body that failed (a new body is written at once); a success,
// or the slice no longer wanted, forgets them.
func TestWriteBackoff(t *testing.T) {
	t0 := time.Unix(0, 0)
	var b writeBackoff
	var waits []time.Duration
	for range 7 {
		waits = append(waits, b.failed("shop/a", 1, t0))
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second}
	if diff := cmp.Diff(want, waits); diff != "" {
		t.Errorf("waits (-want +got):\n%s", diff)
	}
	if b.due("shop/a", 1, t0.Add(29*time.Second)) || !b.due("shop/a", 1, t0.Add(30*time.Second)) {
		t.Error("shop/a due before its 30 s, or not after")
	}
	if !b.due("shop/b", 1, t0) {
		t.Error("shop/b waits for shop/a's failures")
	}
	if !b.due("shop/a", 2, t0) {
		t.Error("a new body of shop/a waits for the failures of another")
	}
	if next, ok := b.next(); !ok || !next.Equal(t0.Add(30*time.Second)) {
		t.Errorf("next = %v, %v; want %v", next, ok, t0.Add(30*time.Second))
	}
	b.succeeded("shop/a")
	if !b.due("shop/a", 1, t0) {
		t.Error("shop/a still waits after a success")
	}
	if got := b.failed("shop/a", 1, t0); got != time.Second {
		t.Errorf("first wait after a success = %v, want 1 s", got)
	}
	b.failed("shop/a", 1, t0)
	if got := b.failed("shop/a", 2, t0); got != time.Second {
		t.Errorf("first wait of a new body = %v, want 1 s", got)
	}
	b.keep(map[string]bool{"shop/b": true})
	if _, ok := b.next(); ok {
		t.Error("shop/a, no longer wanted, still waits")
	}
}

// TestHandoffBacksOffAForbiddenWrite: while an app's namespace is being
// deleted, the API server refuses to create its hand-off slice
// (Forbidden), and everything the hand-off watches changes many times a
// second as the namespace's objects go. The hand-off loop, run every
// 50 ms for 20 s, sends the write at 0, 1, 3, 7 and 15 s, not 400 times;
// once a write succeeds, the next change writes at once.
func TestHandoffBacksOffAForbiddenWrite(t *testing.T) {
	names, err := groupsuffix.New("ebb.dev")
	if err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := routingv1alpha1.AddToScheme(scheme, names.Group()); err != nil {
		t.Fatal(err)
	}
	route := &routingv1alpha1.AppRoute{ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: "shop", UID: "r1"},
		Spec: routingv1alpha1.AppRouteSpec{Service: routingv1alpha1.ServiceReference{Name: "hello"},
			ScaleTargetRef: routingv1alpha1.ScaleTargetReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "hello"}}}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: "shop"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http"), Protocol: corev1.ProtocolTCP}}}}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: "shop"}, Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(0))}}
	act := activatorPod("act-a", "10.0.0.1", func(p *corev1.Pod) { p.Labels = map[string]string{"app": "activator"} })
	cache := fake.NewClientBuilder().WithScheme(scheme).WithObjects(route, svc, dep, &act).
		WithIndex(&discoveryv1.EndpointSlice{}, byService, func(o client.Object) []string {
			return []string{o.GetNamespace() + "/" + o.GetLabels()[discoveryv1.LabelServiceName]}
		}).Build()

	kube := kubefake.NewClientset()
	var mu sync.Mutex
	var writes []time.Duration
	forbidden := true
	t0 := time.Unix(0, 0)
	now := t0
	kube.PrependReactor("patch", "endpointslices", func(k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		writes = append(writes, now.Sub(t0))
		if forbidden {
			return true, nil, apierrors.NewForbidden(discoveryv1.Resource("endpointslices"), "hello-ebb-dev",
				errorString("unable to create new content in namespace shop because it is being terminated"))
		}
		return true, &discoveryv1.EndpointSlice{}, nil
	})
	c := Config{Names: names, PodName: "act-a", PodNamespace: "ebb-system", Pool: DefaultPool, ActivatorSelector: "app=activator", HandoffPort: 8080}
	src := &sources{cfg: c, names: names, log: logr.Discard(), cache: cache}
	h := &handoff{cfg: c, names: names, log: logr.Discard(), kube: kube, src: src, bind: &binder{cfg: c, cache: cache},
		published: prometheus.NewGauge(prometheus.GaugeOpts{Name: "test"}),
		now:       func() time.Time { mu.Lock(); defer mu.Unlock(); return now }}
	ctx := context.Background()
	for range 400 {
		h.reconcileAll(ctx) // its error is the write's
		mu.Lock()
		now = now.Add(50 * time.Millisecond)
		mu.Unlock()
	}
	want := []time.Duration{0, time.Second, 3 * time.Second, 7 * time.Second, 15 * time.Second}
	if diff := cmp.Diff(want, writes); diff != "" {
		t.Errorf("writes of the forbidden slice at (-want +got):\n%s", diff)
	}
	if res, _ := h.Reconcile(ctx, everything); res.RequeueAfter > 11*time.Second || res.RequeueAfter < 10*time.Second {
		t.Errorf("Reconcile asks to run again after %v, want when the back-off ends (%v)", res.RequeueAfter, 31*time.Second-now.Sub(t0))
	}
	// The namespace's deletion is undone (or the write would now pass):
	// the write at the end of the back-off succeeds and clears it.
	mu.Lock()
	forbidden, now, writes = false, t0.Add(31*time.Second), nil
	mu.Unlock()
	if err := h.reconcileAll(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := h.backoff.next(); ok || len(writes) != 1 {
		t.Errorf("after a successful write: %d writes, back-off still pending %v", len(writes), ok)
	}
}

type errorString string

func (e errorString) Error() string { return string(e) }
