package webhook_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/testwait"
	"github.com/ebb-dev/ebb/webhook"
)

func wakes(order routingv1alpha1.WakeOrder, deps ...routingv1alpha1.Dependency) func(*routingv1alpha1.RoutePolicy) {
	return func(p *routingv1alpha1.RoutePolicy) { p.Spec.Wakes, p.Spec.WakeOrder = deps, order }
}

func dep(ns, app string) routingv1alpha1.Dependency {
	return routingv1alpha1.Dependency{Namespace: ns, App: app}
}

// depApp makes an app at zero with a Service selecting its pods.
func depApp(t *testing.T, c client.Client, ns, name string) {
	t.Helper()
	deploymentChain(t, c, ns, name, appTemplate(map[string]string{"ebb.dev/app": name}, nil), 0)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.ServiceSpec{
		Selector: map[string]string{"app.kubernetes.io/name": name},
		Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}}}}
	if err := c.Create(context.Background(), svc); err != nil {
		t.Fatal(err)
	}
}

// routeWakes checks an AppRoute's spec.wakes, wakeOrder and
// status.dependencies.
func routeWakes(ctx context.Context, c client.Client, ns, app string, order routingv1alpha1.WakeOrder, spec []routingv1alpha1.Dependency, status []routingv1alpha1.DependencyStatus) func() error {
	return func() error {
		var r routingv1alpha1.AppRoute
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: app}, &r); err != nil {
			return err
		}
		if diff := cmp.Diff(spec, r.Spec.Wakes); diff != "" || r.Spec.WakeOrder != order {
			return fmt.Errorf("AppRoute %s: wakeOrder %q (want %q), spec.wakes (-want +got):\n%s", app, r.Spec.WakeOrder, order, diff)
		}
		if diff := cmp.Diff(status, r.Status.Dependencies); diff != "" {
			return fmt.Errorf("AppRoute %s: status.dependencies (-want +got):\n%s", app, diff)
		}
		return nil
	}
}

// TestDependencies: a RoutePolicy's wakes reach its AppRoute's spec, those
// of another namespace only once it permits them; status.dependencies
// shows the whole tree and follows a dependency's readiness.
func TestDependencies(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	c := typedClient(t)
	ns, other := "deps", "deps-shared"
	makeNamespace(t, c, ns, map[string]string{"ebb.dev/inject": "enabled"})
	makeNamespace(t, c, other, map[string]string{"ebb.dev/inject": "enabled"})
	for _, app := range []string{"frontend", "api", "db"} {
		depApp(t, c, ns, app)
	}
	depApp(t, c, other, "cache")
	for _, p := range []*routingv1alpha1.RoutePolicy{
		policy(ns, "frontend", "frontend", wakes(routingv1alpha1.WakeOrdered, dep("", "api"), dep(other, "cache"))),
		policy(ns, "api", "api", wakes("", dep(ns, "db"))),
	} {
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	atZero := func(app, neededBy, waitingOn string) routingv1alpha1.DependencyStatus {
		return routingv1alpha1.DependencyStatus{App: app, Namespace: ns, NeededBy: ns + "/" + neededBy, State: routingv1alpha1.DependencyAtZero, WaitingOn: waitingOn}
	}
	cacheNotPermitted := routingv1alpha1.DependencyStatus{App: "cache", Namespace: other, NeededBy: ns + "/frontend", State: routingv1alpha1.DependencyNotPermitted}
	// api wakes Together, so it waits on a ready pod of its own only.
	testwait.Check(t, 10*time.Second, routeWakes(ctx, c, ns, "frontend", routingv1alpha1.WakeOrdered,
		[]routingv1alpha1.Dependency{dep(ns, "api")},
		[]routingv1alpha1.DependencyStatus{atZero("api", "frontend", "a ready pod"), cacheNotPermitted, atZero("db", "api", "a ready pod")}))
	testwait.Check(t, 10*time.Second, routeWakes(ctx, c, ns, "api", routingv1alpha1.WakeTogether,
		[]routingv1alpha1.Dependency{dep(ns, "db")}, []routingv1alpha1.DependencyStatus{atZero("db", "api", "a ready pod")}))
	testwait.Check(t, 10*time.Second, routeWakes(ctx, c, ns, "db", "", nil, nil))

	// api made Ordered: it waits on db, in frontend's tree too.
	if err := c.Patch(ctx, policy(ns, "api", "api"), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"wakeOrder":"Ordered"}}`))); err != nil {
		t.Fatal(err)
	}
	testwait.Check(t, 10*time.Second, routeWakes(ctx, c, ns, "frontend", routingv1alpha1.WakeOrdered,
		[]routingv1alpha1.Dependency{dep(ns, "api")},
		[]routingv1alpha1.DependencyStatus{atZero("api", "frontend", "its dependency deps/db"), cacheNotPermitted, atZero("db", "api", "a ready pod")}))

	// db scaled up: Waking; then a ready endpoint: Ready, and api no
	// longer waits on it.
	scale(t, c, ns, "db", 1)
	waking := atZero("db", "api", "a ready pod")
	waking.State = routingv1alpha1.DependencyWaking
	testwait.Check(t, 10*time.Second, routeWakes(ctx, c, ns, "frontend", routingv1alpha1.WakeOrdered,
		[]routingv1alpha1.Dependency{dep(ns, "api")},
		[]routingv1alpha1.DependencyStatus{atZero("api", "frontend", "its dependency deps/db"), cacheNotPermitted, waking}))
	tr := true
	sl := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db-1", Labels: map[string]string{
		discoveryv1.LabelServiceName: "db", discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.9"}, Conditions: discoveryv1.EndpointConditions{Ready: &tr}}}}
	if err := c.Create(ctx, sl); err != nil {
		t.Fatal(err)
	}
	ready := routingv1alpha1.DependencyStatus{App: "db", Namespace: ns, NeededBy: ns + "/api", State: routingv1alpha1.DependencyReady, ReadyEndpoints: 1}
	testwait.Check(t, 10*time.Second, routeWakes(ctx, c, ns, "frontend", routingv1alpha1.WakeOrdered,
		[]routingv1alpha1.Dependency{dep(ns, "api")},
		[]routingv1alpha1.DependencyStatus{atZero("api", "frontend", "a ready pod"), cacheNotPermitted, ready}))

	// cache's namespace lets deps wake it: it is in frontend's spec.
	if err := c.Create(ctx, policy(other, "cache", "cache", func(p *routingv1alpha1.RoutePolicy) { p.Spec.WakeableFrom = []string{ns} })); err != nil {
		t.Fatal(err)
	}
	cacheAtZero := routingv1alpha1.DependencyStatus{App: "cache", Namespace: other, NeededBy: ns + "/frontend", State: routingv1alpha1.DependencyAtZero, WaitingOn: "a ready pod"}
	testwait.Check(t, 10*time.Second, routeWakes(ctx, c, ns, "frontend", routingv1alpha1.WakeOrdered,
		[]routingv1alpha1.Dependency{dep(ns, "api"), dep(other, "cache")},
		[]routingv1alpha1.DependencyStatus{atZero("api", "frontend", "a ready pod"), cacheAtZero, ready}))
}

// TestDependenciesStatefulSet: a dependency that is a StatefulSet shows
// AtZero at zero replicas and Waking once scaled up, as a Deployment does:
// its state is read from whatever its AppRoute's scaleTargetRef names, and
// its replica change brings the reconcile of the apps that need it.
func TestDependenciesStatefulSet(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	c := typedClient(t)
	ns := "deps-sts"
	makeNamespace(t, c, ns, map[string]string{"ebb.dev/inject": "enabled"})
	depApp(t, c, ns, "frontend")
	db := statefulSet(t, c, ns, "db", appTemplate(map[string]string{"ebb.dev/app": "db"}, nil))
	if err := c.Patch(ctx, db, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":0}}`))); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, policy(ns, "frontend", "frontend", wakes("", dep("", "db")))); err != nil {
		t.Fatal(err)
	}
	dbState := func(s routingv1alpha1.DependencyState) []routingv1alpha1.DependencyStatus {
		return []routingv1alpha1.DependencyStatus{{App: "db", Namespace: ns, NeededBy: ns + "/frontend", State: s, WaitingOn: "a ready pod"}}
	}
	testwait.Check(t, 10*time.Second, routeWakes(ctx, c, ns, "frontend", routingv1alpha1.WakeTogether,
		[]routingv1alpha1.Dependency{dep(ns, "db")}, dbState(routingv1alpha1.DependencyAtZero)))

	// Scaled up (as the activator does, through /scale): Waking.
	if err := c.Patch(ctx, db, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":1}}`))); err != nil {
		t.Fatal(err)
	}
	testwait.Check(t, 10*time.Second, routeWakes(ctx, c, ns, "frontend", routingv1alpha1.WakeTogether,
		[]routingv1alpha1.Dependency{dep(ns, "db")}, dbState(routingv1alpha1.DependencyWaking)))
}

func scale(t *testing.T, c client.Client, ns, name string, replicas int32) {
	t.Helper()
	var d appsv1.Deployment
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &d); err != nil {
		t.Fatal(err)
	}
	d.Spec.Replicas = &replicas
	if err := c.Update(context.Background(), &d); err != nil {
		t.Fatal(err)
	}
}

// TestDependencyCycle: admission refuses a policy whose wakes close a
// cycle, naming it; a cycle that got past admission (the webhook's
// ValidatingWebhookConfiguration absent here, as when two policies are
// created at once) is reported on the policies and none of their wakes
// reaches the AppRoutes, until it is broken.
func TestDependencyCycle(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	c := typedClient(t)
	ns := "cycle"
	makeNamespace(t, c, ns, map[string]string{"ebb.dev/inject": "enabled"})
	for _, app := range []string{"frontend", "api"} {
		depApp(t, c, ns, app)
	}
	if err := c.Create(ctx, policy(ns, "frontend", "frontend", wakes("", dep("", "api")))); err != nil {
		t.Fatal(err)
	}
	// The cache behind admission has seen frontend's policy once its
	// route has its wakes.
	testwait.Check(t, 10*time.Second, routeWakes(ctx, c, ns, "frontend", routingv1alpha1.WakeTogether,
		[]routingv1alpha1.Dependency{dep(ns, "api")},
		[]routingv1alpha1.DependencyStatus{{App: "api", Namespace: ns, NeededBy: ns + "/frontend", State: routingv1alpha1.DependencyAtZero, WaitingOn: "a ready pod"}}))
	err := c.Create(ctx, policy(ns, "api", "api", wakes("", dep(ns, "frontend"))))
	const want = "spec.wakes: cycle/api → cycle/frontend → cycle/api is a cycle: an app cannot need, through others, itself; remove one of these wakes"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("create api's policy closing a cycle: %v; want refused with %q", err, want)
	}
	err = c.Create(ctx, policy(ns, "self", "self", wakes("", dep("", "self"))))
	if want := "spec.wakes: cycle/self → cycle/self is a cycle"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("create a policy waking itself: %v; want refused with %q", err, want)
	}
	err = c.Create(ctx, policy(ns, "twice", "twice", wakes("", dep("", "api"), dep(ns, "api"))))
	if want := "spec.wakes: cycle/api is named twice; name each app once"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("create a policy naming an app twice: %v; want refused with %q", err, want)
	}
	// An update adding the cycle is refused too.
	if err := c.Create(ctx, policy(ns, "api", "api")); err != nil {
		t.Fatal(err)
	}
	if err := setWakes(ctx, c, ns, "api", dep("", "frontend")); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("update api's policy to close a cycle: %v; want refused with %q", err, want)
	}

	// Past admission: the cycle is reported and no wake of it copied.
	name := webhook.ValidatingConfigurationName(ebbNames)
	var vwc admissionregistrationv1.ValidatingWebhookConfiguration
	if err := c.Get(ctx, client.ObjectKey{Name: name}, &vwc); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, &vwc); err != nil {
		t.Fatal(err)
	}
	restore := func() {
		vwc.ResourceVersion, vwc.UID = "", ""
		_ = c.Create(ctx, &vwc)
	}
	defer restore()
	testwait.Check(t, 10*time.Second, func() error {
		return setWakes(ctx, c, ns, "api", dep("", "frontend")) // refused until the API server drops the webhook
	})
	restore()
	for _, p := range []string{"frontend", "api"} {
		testwait.Check(t, 10*time.Second, func() error {
			return wantAccepted(ctx, c, ns, p, metav1.ConditionFalse, "DependencyCycle", "is a cycle: an app cannot need, through others, itself")
		})
		testwait.Check(t, 10*time.Second, routeWakes(ctx, c, ns, p, "", nil, nil))
	}
	// Broken: frontend's wake is back.
	if err := setWakes(ctx, c, ns, "api"); err != nil {
		t.Fatal(err)
	}
	testwait.Check(t, 10*time.Second, func() error {
		return wantAccepted(ctx, c, ns, "frontend", metav1.ConditionTrue, "Accepted", "copied into AppRoute frontend")
	})
	testwait.Check(t, 10*time.Second, routeWakes(ctx, c, ns, "frontend", routingv1alpha1.WakeTogether,
		[]routingv1alpha1.Dependency{dep(ns, "api")},
		[]routingv1alpha1.DependencyStatus{{App: "api", Namespace: ns, NeededBy: ns + "/frontend", State: routingv1alpha1.DependencyAtZero, WaitingOn: "a ready pod"}}))
}

// setWakes sets a policy's spec.wakes by a merge patch (the webhook writes
// its status meanwhile).
func setWakes(ctx context.Context, c client.Client, ns, name string, deps ...routingv1alpha1.Dependency) error {
	body, err := json.Marshal(map[string]any{"spec": map[string]any{"wakes": deps}})
	if err != nil {
		return err
	}
	return c.Patch(ctx, policy(ns, name, name), client.RawPatch(types.MergePatchType, body))
}

// TestPolicyAdmissionWhileValidatorDown: the validating webhook is called
// only for a policy with wakes that is created or whose wakes or app
// change (its matchConditions), so while it is down (here: its
// configuration, as ValidatingConfiguration builds it, points at a dead
// URL) a label edit or a finalizer's removal, and a policy without wakes,
// are admitted; only a policy whose wakes could close a cycle is refused.
func TestPolicyAdmissionWhileValidatorDown(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	c := typedClient(t)
	ns := "validator-down"
	makeNamespace(t, c, ns, nil)
	front := policy(ns, "front", "front", wakes("", dep("", "api")))
	if err := c.Create(ctx, front); err != nil {
		t.Fatal(err)
	}
	dead := "https://127.0.0.1:1" + webhook.ValidatePolicyPath
	vwc := webhook.ValidatingConfiguration(ebbNames, webhook.ConfigurationOptions{ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &dead}})
	vwc.Name = "routepolicy-validator-down"
	vwc.Webhooks[0].NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}} // this test's only
	if err := c.Create(ctx, vwc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), vwc) })
	testwait.Check(t, 10*time.Second, func() error {
		err := c.Create(ctx, policy(ns, "back", "back", wakes("", dep("", "db"))), client.DryRunAll)
		if err == nil || !strings.Contains(err.Error(), "failed calling webhook") {
			return fmt.Errorf("create a policy with wakes: %v; want refused, the webhook being down", err)
		}
		return nil
	})
	label := func(name string, labels map[string]string, finalizers []string) error {
		body, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels, "finalizers": finalizers}})
		if err != nil {
			return err
		}
		return c.Patch(ctx, policy(ns, name, name), client.RawPatch(types.MergePatchType, body))
	}
	if err := label("front", map[string]string{"team": "a"}, []string{"example.com/hold"}); err != nil {
		t.Errorf("label a policy with wakes, the webhook down: %v; want admitted", err)
	}
	if err := label("front", nil, nil); err != nil {
		t.Errorf("remove a policy's finalizer, the webhook down: %v; want admitted", err)
	}
	if err := c.Create(ctx, policy(ns, "plain", "plain")); err != nil {
		t.Errorf("create a policy without wakes, the webhook down: %v; want admitted", err)
	}
	if err := label("plain", map[string]string{"team": "a"}, nil); err != nil {
		t.Errorf("label a policy without wakes, the webhook down: %v; want admitted", err)
	}
	if err := setWakes(ctx, c, ns, "plain", dep("", "front")); err == nil || !strings.Contains(err.Error(), "failed calling webhook") {
		t.Errorf("add wakes to a policy, the webhook down: %v; want refused", err)
	}
	if err := setWakes(ctx, c, ns, "front", dep("", "db")); err == nil || !strings.Contains(err.Error(), "failed calling webhook") {
		t.Errorf("change a policy's wakes, the webhook down: %v; want refused", err)
	}
	if err := setWakes(ctx, c, ns, "front"); err != nil {
		t.Errorf("remove a policy's wakes, the webhook down: %v; want admitted", err)
	}
}
