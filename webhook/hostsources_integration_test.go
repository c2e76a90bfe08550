package webhook_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/testwait"
	"github.com/ebb-dev/ebb/test/cluster"
)

// routedApp makes an app of the ebb.dev instance in ns with hosts as its
// <suffix>/hosts annotation ("" for none), and its Service (port 80 named
// http, to the sidecar), and waits for its AppRoute to be Ready.
func routedApp(t *testing.T, c client.Client, ns, app, hosts string) {
	t.Helper()
	ann := map[string]string{}
	if hosts != "" {
		ann["ebb.dev/hosts"] = hosts
	}
	deploymentChain(t, c, ns, app, appTemplate(map[string]string{"ebb.dev/app": app}, ann), 0)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: app}, Spec: corev1.ServiceSpec{
		Selector: map[string]string{"app.kubernetes.io/name": app},
		Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}},
	}}
	if err := c.Create(context.Background(), svc); err != nil {
		t.Fatal(err)
	}
	testwait.Check(t, 10*time.Second, func() error {
		return wantCondition(context.Background(), c, ns, app, routingv1alpha1.ConditionReady, metav1.ConditionTrue, "Routed")
	})
}

// wantHosts waits for the AppRoute ns/name's spec.hostPaths and
// status.hostSources.
func wantHosts(t *testing.T, c client.Client, ns, name string, hostPaths []routingv1alpha1.HostPaths, sources []routingv1alpha1.HostSource) {
	t.Helper()
	testwait.Check(t, 10*time.Second, func() error {
		r, err := getRoute(context.Background(), c, ebbNames, ns, name)
		if err != nil {
			return err
		}
		if d := cmp.Diff(hostPaths, r.Spec.HostPaths); d != "" {
			return fmt.Errorf("spec.hostPaths (-want +got):\n%s", d)
		}
		if d := cmp.Diff(sources, r.Status.HostSources); d != "" {
			return fmt.Errorf("status.hostSources (-want +got):\n%s", d)
		}
		return nil
	})
}

// wantRouteEvent finds a Warning event with reason about the AppRoute
// ns/name whose note contains note.
func wantRouteEvent(ctx context.Context, c client.Client, ns, name, reason, note string) error {
	var list eventsv1.EventList
	if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return err
	}
	var seen []string
	for _, e := range list.Items {
		if e.Regarding.Kind == routingv1alpha1.Kind && e.Regarding.Name == name {
			seen = append(seen, e.Reason+": "+e.Note)
			if e.Type == corev1.EventTypeWarning && e.Reason == reason && strings.Contains(e.Note, note) {
				return nil
			}
		}
	}
	return fmt.Errorf("no Warning event %s with %q on AppRoute %s/%s; its events: %q", reason, note, ns, name, seen)
}

func prefixRule(host, path string, pt networkingv1.PathType, port networkingv1.ServiceBackendPort) networkingv1.IngressRule {
	return networkingv1.IngressRule{Host: host, IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
		Paths: []networkingv1.HTTPIngressPath{{Path: path, PathType: &pt, Backend: networkingv1.IngressBackend{
			Service: &networkingv1.IngressServiceBackend{Name: "hello", Port: port}}}},
	}}}
}

// TestHostsFromIngress: an app whose Service an Ingress names gets the
// Ingress's hosts, one of them on its /api prefix only, beside its
// annotation's host (which the Ingress names too: both sources shown);
// a rule without a host is skipped and said in a Warning event on the
// AppRoute; editing the Ingress (another prefix, a wildcard host, a rule
// to another port) changes the hosts; deleting it leaves the
// annotation's host alone.
func TestHostsFromIngress(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	c, _ := newClient(t)
	ns := "ingress-hosts"
	makeNamespace(t, c, ns, map[string]string{"ebb.dev/inject": "enabled"})
	routedApp(t, c, ns, "hello", "hello.ingress-hosts.test")
	annotation := routingv1alpha1.HostSource{Host: "hello.ingress-hosts.test", From: []string{"annotation ebb.dev/hosts"}}
	wantHosts(t, c, ns, "hello", nil, []routingv1alpha1.HostSource{annotation})

	ing := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}, Spec: networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{
		prefixRule("hello.ingress-hosts.test", "/", networkingv1.PathTypePrefix, networkingv1.ServiceBackendPort{Number: 80}),
		prefixRule("API.ingress-hosts.test", "/api", networkingv1.PathTypePrefix, networkingv1.ServiceBackendPort{Name: "http"}),
		prefixRule("", "/", networkingv1.PathTypePrefix, networkingv1.ServiceBackendPort{Number: 80}),
	}}}
	ing.Spec.Rules[1].Host = "api.ingress-hosts.test" // the API server refuses upper case
	if err := c.Create(ctx, ing); err != nil {
		t.Fatal(err)
	}
	wantHosts(t, c, ns, "hello",
		[]routingv1alpha1.HostPaths{{Host: "api.ingress-hosts.test", PathPrefixes: []string{"/api"}}, {Host: "hello.ingress-hosts.test"}},
		[]routingv1alpha1.HostSource{
			{Host: "api.ingress-hosts.test", From: []string{"Ingress/web"}},
			{Host: "hello.ingress-hosts.test", From: []string{"Ingress/web", "annotation ebb.dev/hosts"}},
		})
	testwait.Check(t, 10*time.Second, func() error {
		return wantRouteEvent(ctx, c, ns, "hello", "HostsSkipped", "Ingress/web rule 3: no host (it matches every host, which no app may claim)")
	})
	if err := wantCondition(ctx, c, ns, "hello", routingv1alpha1.ConditionConflicted, metav1.ConditionFalse, "NoConflict"); err != nil {
		t.Error(err)
	}

	// Edited: /api becomes /v2 (Exact, taken as a prefix), a wildcard
	// host comes, a rule to another port does not count.
	if err := c.Get(ctx, client.ObjectKeyFromObject(ing), ing); err != nil {
		t.Fatal(err)
	}
	ing.Spec.Rules = []networkingv1.IngressRule{
		prefixRule("api.ingress-hosts.test", "/v2", networkingv1.PathTypeExact, networkingv1.ServiceBackendPort{Number: 80}),
		prefixRule("*.apps.ingress-hosts.test", "/", networkingv1.PathTypeImplementationSpecific, networkingv1.ServiceBackendPort{Number: 80}),
		prefixRule("metrics.ingress-hosts.test", "/", networkingv1.PathTypePrefix, networkingv1.ServiceBackendPort{Number: 9090}),
	}
	if err := c.Update(ctx, ing); err != nil {
		t.Fatal(err)
	}
	wantHosts(t, c, ns, "hello",
		[]routingv1alpha1.HostPaths{{Host: "*.apps.ingress-hosts.test"}, {Host: "api.ingress-hosts.test", PathPrefixes: []string{"/v2"}}},
		[]routingv1alpha1.HostSource{
			{Host: "*.apps.ingress-hosts.test", From: []string{"Ingress/web"}},
			{Host: "api.ingress-hosts.test", From: []string{"Ingress/web"}},
			annotation,
		})

	if err := c.Delete(ctx, ing); err != nil {
		t.Fatal(err)
	}
	wantHosts(t, c, ns, "hello", nil, []routingv1alpha1.HostSource{annotation})
}

// TestIngressHostsConflict: two apps of two namespaces whose Ingresses
// name one host: the younger route is Conflicted, naming the host and the
// route that serves it, until the older Ingress goes.
func TestIngressHostsConflict(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	c, _ := newClient(t)
	for i, ns := range []string{"ingress-a", "ingress-b"} {
		makeNamespace(t, c, ns, map[string]string{"ebb.dev/inject": "enabled"})
		if i == 1 {
			time.Sleep(1100 * time.Millisecond) // creation timestamps have whole seconds
		}
		routedApp(t, c, ns, "hello", "")
		ing := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}, Spec: networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{
			prefixRule("shared.ingress-conflict.test", "/", networkingv1.PathTypePrefix, networkingv1.ServiceBackendPort{Number: 80}),
		}}}
		if err := c.Create(ctx, ing); err != nil {
			t.Fatal(err)
		}
	}
	younger := func(status metav1.ConditionStatus, message string) func() error {
		return func() error {
			r, err := getRoute(ctx, c, ebbNames, "ingress-b", "hello")
			if err != nil {
				return err
			}
			cond := meta.FindStatusCondition(r.Status.Conditions, routingv1alpha1.ConditionConflicted)
			if cond == nil || cond.Status != status || !strings.Contains(cond.Message, message) {
				return fmt.Errorf("Conflicted of the younger route = %+v, want %s with %q", cond, status, message)
			}
			return nil
		}
	}
	testwait.Check(t, 10*time.Second, younger(metav1.ConditionTrue, "host shared.ingress-conflict.test path / (ClaimedByOlderRoute: AppRoute ingress-a/hello serves it)"))
	if err := wantCondition(ctx, c, "ingress-a", "hello", routingv1alpha1.ConditionConflicted, metav1.ConditionFalse, "NoConflict"); err != nil {
		t.Error(err)
	}
	if err := c.Delete(ctx, &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Namespace: "ingress-a", Name: "web"}}); err != nil {
		t.Fatal(err)
	}
	testwait.Check(t, 10*time.Second, younger(metav1.ConditionFalse, "this route serves every host and path it claims"))
}

// gatewayCRD is the Gateway API's HTTPRoute CRD, from the module of the
// version ebb's go.mod names.
func gatewayCRD(t *testing.T) envtest.CRDInstallOptions {
	t.Helper()
	dir, err := cluster.ModuleDir("sigs.k8s.io/gateway-api")
	if err != nil {
		t.Fatal(err)
	}
	return envtest.CRDInstallOptions{Paths: []string{filepath.Join(dir, "config", "crd", "standard", "gateway.networking.k8s.io_httproutes.yaml")}}
}

func httpRoute(ns, name string, hostnames []string, pathType, path string) *unstructured.Unstructured {
	hs := make([]any, len(hostnames))
	for i, h := range hostnames {
		hs[i] = h
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
		"metadata": map[string]any{"namespace": ns, "name": name},
		"spec": map[string]any{
			"parentRefs": []any{map[string]any{"name": "traefik"}},
			"hostnames":  hs,
			"rules": []any{map[string]any{
				"matches":     []any{map[string]any{"path": map[string]any{"type": pathType, "value": path}}},
				"backendRefs": []any{map[string]any{"name": "hello", "port": int64(80)}},
			}},
		},
	}}
}

// TestHostsFromHTTPRoute: without the Gateway API's CRDs an app routes
// as before (Ready, its Ingress's hosts taken); once the HTTPRoute CRD is
// installed, the running webhook finds it (its look, every 2 s in these
// tests, a minute otherwise) and an HTTPRoute's hostnames become the
// app's, with no restart; editing and deleting the HTTPRoute follow; when
// the CRD is deleted (with its HTTPRoutes) their hosts go, and the
// Ingress's stay.
func TestHostsFromHTTPRoute(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	c, _ := newClient(t)
	ns := "httproute-hosts"
	if err := c.List(ctx, &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRouteList"}}); !meta.IsNoMatchError(err) {
		t.Fatalf("HTTPRoutes before the test installs their CRD: %v; want no such API", err)
	}
	makeNamespace(t, c, ns, map[string]string{"ebb.dev/inject": "enabled"})
	routedApp(t, c, ns, "hello", "")
	ing := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}, Spec: networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{
		prefixRule("ingress.httproute-hosts.test", "/", networkingv1.PathTypePrefix, networkingv1.ServiceBackendPort{Number: 80}),
	}}}
	if err := c.Create(ctx, ing); err != nil {
		t.Fatal(err)
	}
	fromIngress := routingv1alpha1.HostSource{Host: "ingress.httproute-hosts.test", From: []string{"Ingress/web"}}
	wantHosts(t, c, ns, "hello", []routingv1alpha1.HostPaths{{Host: "ingress.httproute-hosts.test"}}, []routingv1alpha1.HostSource{fromIngress})

	crd := gatewayCRD(t)
	if _, err := envtest.InstallCRDs(env.Config, crd); err != nil {
		t.Fatal(err)
	}
	hr := httpRoute(ns, "gw", []string{"gw.httproute-hosts.test", "*.gw.httproute-hosts.test"}, "PathPrefix", "/api/")
	// The API server may take a moment to serve the new CRD.
	testwait.Check(t, 10*time.Second, func() error { return c.Create(ctx, hr.DeepCopy()) })
	wantHosts(t, c, ns, "hello",
		[]routingv1alpha1.HostPaths{{Host: "*.gw.httproute-hosts.test", PathPrefixes: []string{"/api"}}, {Host: "gw.httproute-hosts.test", PathPrefixes: []string{"/api"}}, {Host: "ingress.httproute-hosts.test"}},
		[]routingv1alpha1.HostSource{
			{Host: "*.gw.httproute-hosts.test", From: []string{"HTTPRoute/gw"}},
			{Host: "gw.httproute-hosts.test", From: []string{"HTTPRoute/gw"}},
			fromIngress,
		})

	// Edited: one hostname, an Exact path.
	if err := c.Get(ctx, client.ObjectKeyFromObject(hr), hr); err != nil {
		t.Fatal(err)
	}
	edited := httpRoute(ns, "gw", []string{"gw.httproute-hosts.test"}, "Exact", "/login")
	hr.Object["spec"] = edited.Object["spec"]
	if err := c.Update(ctx, hr); err != nil {
		t.Fatal(err)
	}
	wantHosts(t, c, ns, "hello",
		[]routingv1alpha1.HostPaths{{Host: "gw.httproute-hosts.test", PathPrefixes: []string{"/login"}}, {Host: "ingress.httproute-hosts.test"}},
		[]routingv1alpha1.HostSource{{Host: "gw.httproute-hosts.test", From: []string{"HTTPRoute/gw"}}, fromIngress})

	if err := c.Delete(ctx, hr); err != nil {
		t.Fatal(err)
	}
	wantHosts(t, c, ns, "hello", []routingv1alpha1.HostPaths{{Host: "ingress.httproute-hosts.test"}}, []routingv1alpha1.HostSource{fromIngress})

	// The CRD deleted with an HTTPRoute in place: its hosts go.
	if err := c.Create(ctx, httpRoute(ns, "again", []string{"again.httproute-hosts.test"}, "PathPrefix", "/")); err != nil {
		t.Fatal(err)
	}
	wantHosts(t, c, ns, "hello",
		[]routingv1alpha1.HostPaths{{Host: "again.httproute-hosts.test"}, {Host: "ingress.httproute-hosts.test"}},
		[]routingv1alpha1.HostSource{{Host: "again.httproute-hosts.test", From: []string{"HTTPRoute/again"}}, fromIngress})
	if err := envtest.UninstallCRDs(env.Config, crd); err != nil {
		t.Fatal(err)
	}
	wantHosts(t, c, ns, "hello", []routingv1alpha1.HostPaths{{Host: "ingress.httproute-hosts.test"}}, []routingv1alpha1.HostSource{fromIngress})
	if err := wantCondition(ctx, c, ns, "hello", routingv1alpha1.ConditionReady, metav1.ConditionTrue, "Routed"); err != nil {
		t.Error(err)
	}
}

// TestIngressHostsOfAnotherNamespace: an Ingress of namespace squat, older
// than anything of namespace owner, names a host of a domain a
// DomainClaim binds to owner and a name in owner's part of the cluster
// domain: its app's AppRoute lists them (they are its Ingress's) but
// serves neither, its Conflicted condition naming each and why, and
// owner's app, younger, serves the claimed host.
func TestIngressHostsOfAnotherNamespace(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	c, _ := newClient(t)
	for _, ns := range []string{"ingress-squat", "ingress-owner"} {
		makeNamespace(t, c, ns, map[string]string{"ebb.dev/inject": "enabled"})
	}
	routedApp(t, c, "ingress-squat", "hello", "")
	ing := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Namespace: "ingress-squat", Name: "web"}, Spec: networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{
		prefixRule("api.owner.ingress-tenancy.test", "/", networkingv1.PathTypePrefix, networkingv1.ServiceBackendPort{Number: 80}),
		prefixRule("hello.ingress-owner.svc.cluster.local", "/", networkingv1.PathTypePrefix, networkingv1.ServiceBackendPort{Number: 80}),
	}}}
	if err := c.Create(ctx, ing); err != nil {
		t.Fatal(err)
	}
	wantHosts(t, c, "ingress-squat", "hello",
		[]routingv1alpha1.HostPaths{{Host: "api.owner.ingress-tenancy.test"}, {Host: "hello.ingress-owner.svc.cluster.local"}},
		[]routingv1alpha1.HostSource{
			{Host: "api.owner.ingress-tenancy.test", From: []string{"Ingress/web"}},
			{Host: "hello.ingress-owner.svc.cluster.local", From: []string{"Ingress/web"}},
		})
	time.Sleep(1100 * time.Millisecond) // creation timestamps have whole seconds
	routedApp(t, c, "ingress-owner", "hello", "api.owner.ingress-tenancy.test")

	claim := &unstructured.Unstructured{}
	claim.SetGroupVersionKind(routingv1alpha1.GroupVersion(ebbNames.Group()).WithKind(routingv1alpha1.DomainClaimKind))
	claim.SetName("owner.ingress-tenancy.test")
	claim.Object["spec"] = map[string]any{"namespace": "ingress-owner"}
	if err := c.Create(ctx, claim); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), claim) })
	testwait.Check(t, 15*time.Second, func() error {
		r, err := getRoute(ctx, c, ebbNames, "ingress-squat", "hello")
		if err != nil {
			return err
		}
		cond := meta.FindStatusCondition(r.Status.Conditions, routingv1alpha1.ConditionConflicted)
		if cond == nil || cond.Status != metav1.ConditionTrue ||
			!strings.Contains(cond.Message, "host api.owner.ingress-tenancy.test (DomainClaimedByAnotherNamespace)") ||
			!strings.Contains(cond.Message, "host hello.ingress-owner.svc.cluster.local (ClusterNameOfAnotherNamespace)") {
			return fmt.Errorf("the squatter's Conflicted = %+v", cond)
		}
		return wantCondition(ctx, c, "ingress-owner", "hello", routingv1alpha1.ConditionConflicted, metav1.ConditionFalse, "NoConflict")
	})
}
