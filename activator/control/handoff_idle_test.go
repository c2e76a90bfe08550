package control

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/test/repo"
)

// appSlice is the EndpointSlice controller's slice of Service hello with
// one endpoint, changed by mods.
func appSlice(mods ...func(*discoveryv1.Endpoint)) *discoveryv1.EndpointSlice {
	ep := discoveryv1.Endpoint{Addresses: []string{"10.1.0.7"},
		Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)}}
	for _, m := range mods {
		m(&ep)
	}
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "hello-abcde", Namespace: "shop", Labels: map[string]string{
			discoveryv1.LabelServiceName: "hello", discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{ep},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(int32(8080))}},
	}
}

func terminating(ep *discoveryv1.Endpoint) {
	ep.Conditions = discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(true), Terminating: ptr.To(true)}
}

func cond(typ string, status metav1.ConditionStatus) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, Reason: "Test", LastTransitionTime: metav1.Now()}
}

// TestHandoffWhenIdle: the hand-off slice is wanted as soon as the app may
// go to zero (Idle True, written by the scaler KEDA asks), while its pods
// still serve, so it is in every Service consumer's configuration before
// KEDA sets replicas to 0 and the last endpoint turns terminating. Without
// Idle True it is wanted, as before, only at replicas 0 or with no ready
// endpoint.
func TestHandoffWhenIdle(t *testing.T) {
	names := groupsuffix.MustNew(groupsuffix.Default)
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := routingv1alpha1.AddToScheme(scheme, names.Group()); err != nil {
		t.Fatal(err)
	}
	idleTrue, idleFalse := cond(routingv1alpha1.ConditionIdle, metav1.ConditionTrue), cond(routingv1alpha1.ConditionIdle, metav1.ConditionFalse)
	kedaTrue, kedaFalse := cond(routingv1alpha1.ConditionScaledByKEDA, metav1.ConditionTrue), cond(routingv1alpha1.ConditionScaledByKEDA, metav1.ConditionFalse)
	for _, tc := range []struct {
		name     string
		replicas int32
		slice    *discoveryv1.EndpointSlice
		conds    []metav1.Condition
		want     bool
		headless bool
	}{
		{"warm, Idle True: KEDA may take it to zero", 1, appSlice(), []metav1.Condition{idleTrue, kedaTrue}, true, false},
		{"warm at 3 replicas, Idle True (KEDA sets 0 from N too)", 3, appSlice(), []metav1.Condition{idleTrue, kedaTrue}, true, false},
		{"warm, Idle True, ScaledByKEDA not yet written", 1, appSlice(), []metav1.Condition{idleTrue}, true, false},
		{"warm, Idle False", 1, appSlice(), []metav1.Condition{idleFalse, kedaTrue}, false, false},
		{"warm, no Idle (no scaler has written it)", 1, appSlice(), []metav1.Condition{kedaTrue}, false, false},
		{"warm, Idle True left over, no ScaledObject scales it", 1, appSlice(), []metav1.Condition{idleTrue, kedaFalse}, false, false},
		{"replicas 0, its endpoint still ready, Idle False", 0, appSlice(), []metav1.Condition{idleFalse}, true, false},
		{"its only endpoint terminating, no Idle", 1, appSlice(terminating), nil, true, false},
		// A StatefulSet's governing Service picked while no ClusterIP one
		// existed: its clients dial pod addresses on the app's port.
		{"headless Service, replicas 0, Idle True", 0, appSlice(terminating), []metav1.Condition{idleTrue, kedaTrue}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			route := &routingv1alpha1.AppRoute{ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: "shop", UID: "r1"},
				Spec: routingv1alpha1.AppRouteSpec{Service: routingv1alpha1.ServiceReference{Name: "hello"},
					ScaleTargetRef: routingv1alpha1.ScaleTargetReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "hello"}},
				Status: routingv1alpha1.AppRouteStatus{Conditions: tc.conds}}
			svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: "shop"},
				Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http"), Protocol: corev1.ProtocolTCP}}}}
			if tc.headless {
				svc.Spec.ClusterIP = corev1.ClusterIPNone
			}
			dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: "shop"}, Spec: appsv1.DeploymentSpec{Replicas: ptr.To(tc.replicas)}}
			cache := fake.NewClientBuilder().WithScheme(scheme).WithObjects(route, svc, dep, tc.slice).
				WithIndex(&discoveryv1.EndpointSlice{}, byService, func(o client.Object) []string {
					return []string{o.GetNamespace() + "/" + o.GetLabels()[discoveryv1.LabelServiceName]}
				}).Build()
			c := Config{Names: names, PodName: "act-a", PodNamespace: "ebb-system", Pool: DefaultPool, ActivatorSelector: "app=activator", HandoffPort: 8080}
			h := &handoff{cfg: c, names: names, log: logr.Discard(), src: &sources{cfg: c, names: names, log: logr.Discard(), cache: cache}}
			if got := h.needsHandoff(context.Background(), route, svc) != ""; got != tc.want {
				t.Errorf("needsHandoff = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestHandoffFollowsIdle runs the hand-off loop as the leader does, on the
// manager's cache of a real kube-apiserver: a warm app (replicas 1, its
// endpoint ready) gets its hand-off slice when the scaler writes Idle True
// to its AppRoute's status, and loses it when Idle turns False, each within
// 3 s, so through the watch of AppRoutes' status (the loop's own period is
// 10 s); with Idle absent or False it has none.
func TestHandoffFollowsIdle(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a kube-apiserver (envtest; make test-integration runs it)")
	}
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		assets = filepath.Join(repo.MustRoot(t), "bin", "k8s")
	}
	env := &envtest.Environment{BinaryAssetsDirectory: assets, CRDDirectoryPaths: []string{filepath.Join(repo.MustRoot(t), "config", "crd")}, ErrorIfCRDPathMissing: true}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start kube-apiserver (envtest): %v", err)
	}
	t.Cleanup(func() { env.Stop() })
	names := groupsuffix.MustNew(groupsuffix.Default)
	c := Config{Names: names, PodName: "act-0", PodNamespace: "default", ActivatorSelector: "app=activator", Pool: DefaultPool, HandoffPort: 8080, AdminPort: 1, Resync: time.Hour}
	mgr, err := newManager(cfg, c, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	kube := kubernetes.NewForConfigOrDie(cfg)
	cl, err := client.New(cfg, client.Options{Scheme: mgr.GetScheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()

	// This pool's one activator, as the kubelet reports a ready one.
	act := activatorPod("act-0", "10.0.0.1", func(p *corev1.Pod) {
		p.Namespace, p.Labels = "default", map[string]string{"app": "activator"}
		p.Spec.Containers = []corev1.Container{{Name: "activator", Image: "activator"}}
	})
	st := act.Status
	must(t, cl.Create(ctx, &act))
	act.Status = st
	must(t, cl.Status().Update(ctx, &act))
	// The app, warm: replicas 1, its endpoint ready.
	must(t, cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}))
	labels := map[string]string{"app": "hello"}
	must(t, cl.Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: "shop"}, Spec: appsv1.DeploymentSpec{
		Replicas: ptr.To(int32(1)), Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}}}))
	must(t, cl.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: "shop"},
		Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http"), Protocol: corev1.ProtocolTCP}}}}))
	must(t, cl.Create(ctx, appSlice()))
	route := &routingv1alpha1.AppRoute{ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: "shop"},
		Spec: routingv1alpha1.AppRouteSpec{AppPort: 8080, Hosts: []string{"hello.example.com"}, Service: routingv1alpha1.ServiceReference{Name: "hello"},
			ScaleTargetRef: routingv1alpha1.ScaleTargetReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "hello"}}}
	must(t, cl.Create(ctx, route))

	src := &sources{cfg: c, names: names, log: logr.Discard(), cache: mgr.GetCache()}
	ho := &handoff{cfg: c, names: names, log: logr.Discard(), kube: kube, src: src, bind: &binder{cfg: c, cache: mgr.GetCache()},
		published: prometheus.NewGauge(prometheus.GaugeOpts{Name: "test"})}
	loop, err := newLoop(mgr, "handoff", ho, 0, &routingv1alpha1.AppRoute{}, &corev1.Service{}, &discoveryv1.EndpointSlice{}, &appsv1.Deployment{}, &corev1.Pod{})
	if err != nil {
		t.Fatal(err)
	}
	must(t, mgr.Add(loop))
	go func() { _ = mgr.Start(ctx) }()
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		t.Fatal("cache did not sync")
	}

	sliceName := poolSliceName("hello", names, DefaultPool)
	handoffSlice := func() (*discoveryv1.EndpointSlice, bool) {
		sl, err := kube.DiscoveryV1().EndpointSlices("shop").Get(ctx, sliceName, metav1.GetOptions{})
		return sl, err == nil
	}
	// setIdle writes the Idle condition as the scaler does ("": removes it).
	setIdle := func(status metav1.ConditionStatus) {
		t.Helper()
		var r routingv1alpha1.AppRoute
		must(t, cl.Get(ctx, client.ObjectKeyFromObject(route), &r))
		if status == "" {
			meta.RemoveStatusCondition(&r.Status.Conditions, routingv1alpha1.ConditionIdle)
		} else {
			meta.SetStatusCondition(&r.Status.Conditions, metav1.Condition{Type: routingv1alpha1.ConditionIdle, Status: status, Reason: "Test"})
		}
		must(t, cl.Status().Update(ctx, &r))
	}
	// within waits up to d for the hand-off slice to exist (want) or not.
	within := func(d time.Duration, want bool) (time.Duration, bool) {
		begin := time.Now()
		for {
			if _, ok := handoffSlice(); ok == want {
				return time.Since(begin), true
			}
			if time.Since(begin) > d {
				return d, false
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	stays := func(what string) {
		t.Helper()
		time.Sleep(2 * time.Second)
		if sl, ok := handoffSlice(); ok {
			t.Fatalf("%s: hand-off slice %s published with %d activator(s); want none while the app serves and is not idle", what, sliceName, len(sl.Endpoints))
		}
	}

	stays("no Idle condition")
	setIdle(metav1.ConditionFalse)
	stays("Idle False")

	setIdle(metav1.ConditionTrue)
	took, ok := within(3*time.Second, true)
	if !ok {
		t.Fatalf("Idle True with the app's pod still ready: no hand-off slice after %v", took)
	}
	sl, _ := handoffSlice()
	if len(sl.Endpoints) != 1 || sl.Endpoints[0].Addresses[0] != "10.0.0.1" {
		t.Errorf("hand-off slice endpoints %+v, want the one activator 10.0.0.1", sl.Endpoints)
	}
	t.Logf("Idle True → hand-off slice published in %v", took.Round(time.Millisecond))

	setIdle(metav1.ConditionFalse)
	if took, ok = within(3*time.Second, false); !ok {
		t.Fatalf("Idle False with the app's pod ready: hand-off slice still there after %v", took)
	}
	t.Logf("Idle False → hand-off slice removed in %v", took.Round(time.Millisecond))

	// Once more, then Idle gone (the route written anew): no slice.
	setIdle(metav1.ConditionTrue)
	if took, ok = within(3*time.Second, true); !ok {
		t.Fatalf("Idle True again: no hand-off slice after %v", took)
	}
	setIdle("")
	if took, ok = within(3*time.Second, false); !ok {
		t.Fatalf("Idle removed with the app's pod ready: hand-off slice still there after %v", took)
	}
	stays("Idle removed")
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
