package control

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/ebb-dev/ebb/activator/proxy"
	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/internal/testwait"
	"github.com/ebb-dev/ebb/internal/workload"
	"github.com/ebb-dev/ebb/test/workers"
)

// TestHandoffScaledToZeroAnyKind: a warm-looking app (its endpoint still
// ready, no Idle) whose workload is at 0 replicas gets the hand-off slice
// whatever the workload's kind: a StatefulSet, or a Worker when
// workers.example.com is listed in --scale-targets. A Worker of a kind not
// listed is not read, and its app is left to its endpoints — also when
// another kind of its group is listed (gadgets.example.com): a listed kind
// is matched by group and kind, as the webhook matches it, not by group
// only (the activator may read no other kind of the group).
func TestHandoffScaledToZeroAnyKind(t *testing.T) {
	names := groupsuffix.MustNew(groupsuffix.Default)
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := routingv1alpha1.AddToScheme(scheme, names.Group()); err != nil {
		t.Fatal(err)
	}
	listed := []schema.GroupResource{workers.GVR.GroupResource()}
	gadgets := []schema.GroupResource{{Group: workers.GVK.Group, Resource: "gadgets"}}
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(workers.GVK, meta.RESTScopeNamespace)
	mapper.Add(workers.GroupVersion.WithKind("Gadget"), meta.RESTScopeNamespace)
	worker := func(replicas int64) client.Object {
		u, err := workers.New("shop", "hello", int32(replicas), corev1.PodTemplateSpec{})
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	sts := func(replicas int32) client.Object {
		return &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: "shop"}, Spec: appsv1.StatefulSetSpec{Replicas: ptr.To(replicas)}}
	}
	for _, tc := range []struct {
		name    string
		ref     routingv1alpha1.ScaleTargetReference
		target  client.Object
		targets []schema.GroupResource
		want    string
	}{
		{"StatefulSet at 0", routingv1alpha1.ScaleTargetReference{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "hello"}, sts(0), nil, "the StatefulSet is scaled to 0"},
		{"StatefulSet at 1", routingv1alpha1.ScaleTargetReference{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "hello"}, sts(1), nil, ""},
		{"listed Worker at 0", routingv1alpha1.ScaleTargetReference{APIVersion: "example.com/v1", Kind: "Worker", Name: "hello"}, worker(0), listed, "the Worker is scaled to 0"},
		{"listed Worker at 2", routingv1alpha1.ScaleTargetReference{APIVersion: "example.com/v1", Kind: "Worker", Name: "hello"}, worker(2), listed, ""},
		{"Worker not listed", routingv1alpha1.ScaleTargetReference{APIVersion: "example.com/v1", Kind: "Worker", Name: "hello"}, worker(0), nil, ""},
		{"Worker not listed, Gadget of its group listed", routingv1alpha1.ScaleTargetReference{APIVersion: "example.com/v1", Kind: "Worker", Name: "hello"}, worker(0), gadgets, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			route := &routingv1alpha1.AppRoute{ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: "shop", UID: "r1"},
				Spec: routingv1alpha1.AppRouteSpec{Service: routingv1alpha1.ServiceReference{Name: "hello"}, ScaleTargetRef: tc.ref}}
			svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: "shop"},
				Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http"), Protocol: corev1.ProtocolTCP}}}}
			cache := fake.NewClientBuilder().WithScheme(scheme).WithObjects(route, svc, tc.target, appSlice()).
				WithIndex(&discoveryv1.EndpointSlice{}, byService, func(o client.Object) []string {
					return []string{o.GetNamespace() + "/" + o.GetLabels()[discoveryv1.LabelServiceName]}
				}).Build()
			c := Config{Names: names, PodName: "act-a", PodNamespace: "ebb-system", Pool: DefaultPool, ActivatorSelector: "app=activator", HandoffPort: 8080, ScaleTargets: tc.targets}
			h := &handoff{cfg: c, names: names, log: logr.Discard(), src: &sources{cfg: c, names: names, log: logr.Discard(), cache: cache}, mapper: mapper}
			if got := h.needsHandoff(context.Background(), route, svc); got != tc.want {
				t.Errorf("needsHandoff = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestSlimReplicas: the cache keeps of a listed kind's object what the
// hand-off reads and nothing of its pod template.
func TestSlimReplicas(t *testing.T) {
	u, err := workers.New("shop", "hello", 3, corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "x"}}}})
	if err != nil {
		t.Fatal(err)
	}
	u.SetUID("u1")
	slim := slimReplicas(u)
	if n, set, _ := workload.Replicas(slim); !set || n != 3 || slim.GetUID() != "u1" || slim.GetKind() != "Worker" {
		t.Errorf("slim %v", slim.Object)
	}
	if _, ok, _ := unstructured.NestedMap(slim.Object, "spec", "template"); ok {
		t.Error("the pod template was kept")
	}
}

// TestColdWatchScaledAnyKind: during a cold start of an app whose
// workload is a Worker, the watcher marks "scaled" when the Worker's
// spec.replicas goes above 0 (KEDA's /scale), on a real kube-apiserver.
func TestColdWatchScaledAnyKind(t *testing.T) {
	cfg, _ := apiServer(t)
	ctx := t.Context()
	crd, err := workers.CRD()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := apiextensionsv1.AddToScheme(cl.Scheme()); err != nil {
		t.Fatal(err)
	}
	if err := cl.Create(ctx, crd); err != nil {
		t.Fatal(err)
	}
	w, err := workers.New("ebb-system", "jobs", 0, corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "jobs"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "x"}}}})
	if err != nil {
		t.Fatal(err)
	}
	testwait.Check(t, 20*time.Second, func() error { return cl.Create(ctx, w.DeepCopy()) })
	watcher, err := ColdStartWatcher(cfg, groupsuffix.MustNew(groupsuffix.Default), logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	scaled := make(chan struct{}, 10)
	watcher.Watch(ctx, "ebb-system", "jobs", workload.KeyOf("example.com/v1", "Worker", "jobs"), time.Now(), func(i int, _ time.Time) {
		if i == proxy.MarkScaled {
			scaled <- struct{}{}
		}
	})
	select {
	case <-scaled:
		t.Fatal("marked scaled at 0 replicas")
	case <-time.After(500 * time.Millisecond):
	}
	patch := []byte(`{"spec":{"replicas":1}}`)
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(workers.GVK)
	u.SetNamespace("ebb-system")
	u.SetName("jobs")
	if err := cl.Patch(ctx, u, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-scaled:
	case <-time.After(10 * time.Second):
		t.Fatal("no scaled mark within 10s of spec.replicas 1")
	}
}
