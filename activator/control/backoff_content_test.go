package control

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
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

// TestBackoffIsPerBody: the slice's writes fail for 16 s
// (an API server answering 500/429, a webhook on EndpointSlices down),
// then pass again. At 16 s act-b's process exits (the kubelet's word). The
// write that takes act-b out of the slice goes at once: the back-off holds
// only the earlier, different body (it held the new one until 31 s).
func TestBackoffIsPerBody(t *testing.T) {
	names, _ := groupsuffix.New("ebb.dev")
	scheme := runtime.NewScheme()
	clientgoscheme.AddToScheme(scheme)
	routingv1alpha1.AddToScheme(scheme, names.Group())
	route := &routingv1alpha1.AppRoute{ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: "shop", UID: "r1"},
		Spec: routingv1alpha1.AppRouteSpec{Service: routingv1alpha1.ServiceReference{Name: "hello"},
			ScaleTargetRef: routingv1alpha1.ScaleTargetReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "hello"}}}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: "shop"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http"), Protocol: corev1.ProtocolTCP}}}}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: "shop"}, Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(0))}}
	lab := func(p *corev1.Pod) { p.Labels = map[string]string{"app": "activator"} }
	a, b := activatorPod("act-a", "10.0.0.1", lab), activatorPod("act-b", "10.0.0.2", lab)
	cache := fake.NewClientBuilder().WithScheme(scheme).WithObjects(route, svc, dep, &a, &b).
		WithIndex(&discoveryv1.EndpointSlice{}, byService, func(o client.Object) []string {
			return []string{o.GetNamespace() + "/" + o.GetLabels()[discoveryv1.LabelServiceName]}
		}).Build()
	kube := kubefake.NewClientset()
	var mu sync.Mutex
	failing := true
	t0 := time.Unix(0, 0)
	now := t0
	var removedAt time.Duration = -1
	crashed := false
	kube.PrependReactor("patch", "endpointslices", func(k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		if failing {
			return true, nil, apierrors.NewInternalError(errorString("etcdserver: request timed out"))
		}
		if crashed && removedAt < 0 {
			removedAt = now.Sub(t0)
		}
		return true, &discoveryv1.EndpointSlice{}, nil
	})
	c := Config{Names: names, PodName: "act-a", PodNamespace: "ebb-system", Pool: DefaultPool, ActivatorSelector: "app=activator", HandoffPort: 8080}
	src := &sources{cfg: c, names: names, log: logr.Discard(), cache: cache}
	h := &handoff{cfg: c, names: names, log: logr.Discard(), kube: kube, src: src, bind: &binder{cfg: c, cache: cache},
		published: prometheus.NewGauge(prometheus.GaugeOpts{Name: "test"}),
		now:       func() time.Time { mu.Lock(); defer mu.Unlock(); return now }}
	ctx := context.Background()
	for i := range 1200 { // 60 s, a pass every 50 ms
		el := time.Duration(i) * 50 * time.Millisecond
		if el == 16*time.Second {
			mu.Lock()
			failing, crashed = false, true
			mu.Unlock()
			exited(&b)
			b.ResourceVersion = ""
			var cur corev1.Pod
			cache.Get(ctx, client.ObjectKeyFromObject(&b), &cur)
			cur.Status = b.Status
			if err := cache.Status().Update(ctx, &cur); err != nil { // the status subresource: Update keeps the status
				t.Fatal(err)
			}
		}
		h.reconcileAll(ctx)
		mu.Lock()
		now = now.Add(50 * time.Millisecond)
		mu.Unlock()
	}
	t.Logf("act-b crashed at 16 s; the write without it went at %v", removedAt)
	if removedAt < 0 || removedAt > 17*time.Second {
		t.Errorf("the crashed act-b left the slice %v after its crash (the back-off of an earlier failed write), want at once", removedAt-16*time.Second)
	}
}
