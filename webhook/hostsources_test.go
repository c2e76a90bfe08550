package webhook

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/event"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/routing"
	"github.com/ebb-dev/ebb/test/repo"
)

// helloPort is the app's Service hello, port 80 named http.
var helloPort = appPort{service: "hello", number: 80, name: "http"}

func ingPath(path string, pt networkingv1.PathType, svc string, port networkingv1.ServiceBackendPort) networkingv1.HTTPIngressPath {
	return networkingv1.HTTPIngressPath{Path: path, PathType: &pt, Backend: networkingv1.IngressBackend{
		Service: &networkingv1.IngressServiceBackend{Name: svc, Port: port}}}
}

func ingRule(host string, paths ...networkingv1.HTTPIngressPath) networkingv1.IngressRule {
	return networkingv1.IngressRule{Host: host, IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{Paths: paths}}}
}

var (
	byNumber = networkingv1.ServiceBackendPort{Number: 80}
	byName   = networkingv1.ServiceBackendPort{Name: "http"}
)

// TestIngressClaims: the rules of an Ingress whose backend is the app's
// Service port, by number or by name, give their hosts and paths; other
// Services and ports give nothing; a rule without a host and the default
// backend are skipped and said.
func TestIngressClaims(t *testing.T) {
	for _, tc := range []struct {
		name        string
		rules       []networkingv1.IngressRule
		defaultBack *networkingv1.IngressBackend
		want        []hostClaim
		skipped     []string
	}{{
		name: "two hosts, one with a prefix",
		rules: []networkingv1.IngressRule{
			ingRule("hello.example.com", ingPath("/", networkingv1.PathTypePrefix, "hello", byNumber)),
			ingRule("api.example.com", ingPath("/api/", networkingv1.PathTypePrefix, "hello", byName), ingPath("/other", networkingv1.PathTypePrefix, "other", byNumber)),
		},
		want: []hostClaim{
			{host: "hello.example.com", prefixes: []string{"/"}, source: "Ingress/web"},
			{host: "api.example.com", prefixes: []string{"/api"}, source: "Ingress/web"},
		},
	}, {
		name: "path types",
		rules: []networkingv1.IngressRule{ingRule("*.example.com",
			ingPath("/login", networkingv1.PathTypeExact, "hello", byNumber),
			ingPath("/static/", networkingv1.PathTypeImplementationSpecific, "hello", byNumber),
			ingPath("", networkingv1.PathTypeImplementationSpecific, "hello", byNumber),
			ingPath("/exact/", networkingv1.PathTypeExact, "hello", byNumber),
		)},
		want: []hostClaim{{host: "*.example.com", prefixes: []string{"/login", "/static", "/", "/exact/"}, source: "Ingress/web"}},
	}, {
		name: "another Service, another port, another port name",
		rules: []networkingv1.IngressRule{
			ingRule("a.example.com", ingPath("/", networkingv1.PathTypePrefix, "other", byNumber)),
			ingRule("b.example.com", ingPath("/", networkingv1.PathTypePrefix, "hello", networkingv1.ServiceBackendPort{Number: 9090})),
			ingRule("c.example.com", ingPath("/", networkingv1.PathTypePrefix, "hello", networkingv1.ServiceBackendPort{Name: "metrics"})),
			{Host: "d.example.com"},
		},
	}, {
		name:        "no host, default backend",
		rules:       []networkingv1.IngressRule{ingRule("", ingPath("/", networkingv1.PathTypePrefix, "hello", byNumber))},
		defaultBack: &networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: "hello", Port: byName}},
		skipped: []string{
			"Ingress/web: its defaultBackend matches every host, which no app may claim",
			"Ingress/web rule 1: no host (it matches every host, which no app may claim)",
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			ing := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"},
				Spec: networkingv1.IngressSpec{Rules: tc.rules, DefaultBackend: tc.defaultBack}}
			got, skipped := ingressClaims(ing, helloPort)
			if d := cmp.Diff(tc.want, got, cmp.AllowUnexported(hostClaim{})); d != "" {
				t.Errorf("claims (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.skipped, skipped); d != "" {
				t.Errorf("skipped (-want +got):\n%s", d)
			}
			// The cache's slim copy says the same.
			slimGot, slimSkipped := ingressClaims(ingressTransform(ing), helloPort)
			if d := cmp.Diff(got, slimGot, cmp.AllowUnexported(hostClaim{})); d != "" || !cmp.Equal(skipped, slimSkipped) {
				t.Errorf("the cached Ingress says otherwise (-full +cached):\n%s%v", d, slimSkipped)
			}
		})
	}
}

func backendRef(name string, port int32, mod func(*gatewayv1.HTTPBackendRef)) gatewayv1.HTTPBackendRef {
	ref := gatewayv1.HTTPBackendRef{BackendRef: gatewayv1.BackendRef{BackendObjectReference: gatewayv1.BackendObjectReference{
		Name: gatewayv1.ObjectName(name), Port: ptr.To(gatewayv1.PortNumber(port))}}}
	if mod != nil {
		mod(&ref)
	}
	return ref
}

func pathMatch(pt gatewayv1.PathMatchType, value string) gatewayv1.HTTPRouteMatch {
	return gatewayv1.HTTPRouteMatch{Path: &gatewayv1.HTTPPathMatch{Type: &pt, Value: &value}}
}

// TestHTTPRouteClaims: each hostname of an HTTPRoute with a rule whose
// backendRef is the app's Service port gets the rule's path matches;
// refs to other kinds, namespaces, ports or with weight 0 do not count; a
// RegularExpression match and a route without hostnames are skipped and
// said.
func TestHTTPRouteClaims(t *testing.T) {
	hello := backendRef("hello", 80, nil)
	for _, tc := range []struct {
		name      string
		hostnames []gatewayv1.Hostname
		rules     []gatewayv1.HTTPRouteRule
		want      []hostClaim
		skipped   []string
	}{{
		name:      "hostnames and prefixes",
		hostnames: []gatewayv1.Hostname{"hello.example.com", "*.hello.example.com"},
		rules: []gatewayv1.HTTPRouteRule{
			{Matches: []gatewayv1.HTTPRouteMatch{pathMatch(gatewayv1.PathMatchPathPrefix, "/api/"), pathMatch(gatewayv1.PathMatchExact, "/login")}, BackendRefs: []gatewayv1.HTTPBackendRef{hello}},
			{Matches: []gatewayv1.HTTPRouteMatch{pathMatch(gatewayv1.PathMatchPathPrefix, "/other")}, BackendRefs: []gatewayv1.HTTPBackendRef{backendRef("other", 80, nil)}},
		},
		want: []hostClaim{
			{host: "hello.example.com", prefixes: []string{"/api", "/login"}, source: "HTTPRoute/web"},
			{host: "*.hello.example.com", prefixes: []string{"/api", "/login"}, source: "HTTPRoute/web"},
		},
	}, {
		name:      "no matches, a match without a path, a regular expression",
		hostnames: []gatewayv1.Hostname{"hello.example.com"},
		rules: []gatewayv1.HTTPRouteRule{
			{BackendRefs: []gatewayv1.HTTPBackendRef{hello}},
			{Matches: []gatewayv1.HTTPRouteMatch{{Method: ptr.To(gatewayv1.HTTPMethodGet)}, pathMatch(gatewayv1.PathMatchRegularExpression, "/v[0-9]+")}, BackendRefs: []gatewayv1.HTTPBackendRef{hello}},
		},
		want:    []hostClaim{{host: "hello.example.com", prefixes: []string{"/", "/"}, source: "HTTPRoute/web"}},
		skipped: []string{"HTTPRoute/web rule 2 match 2: a RegularExpression path (ebb routes by path prefix only)"},
	}, {
		name:      "refs that are not the app's port",
		hostnames: []gatewayv1.Hostname{"hello.example.com"},
		rules: []gatewayv1.HTTPRouteRule{{BackendRefs: []gatewayv1.HTTPBackendRef{
			backendRef("hello", 8080, nil),
			backendRef("hello", 80, func(r *gatewayv1.HTTPBackendRef) { r.Weight = ptr.To[int32](0) }),
			backendRef("hello", 80, func(r *gatewayv1.HTTPBackendRef) { r.Namespace = ptr.To(gatewayv1.Namespace("other")) }),
			backendRef("hello", 80, func(r *gatewayv1.HTTPBackendRef) { r.Kind = ptr.To(gatewayv1.Kind("ServiceImport")) }),
			backendRef("hello", 80, func(r *gatewayv1.HTTPBackendRef) { r.Group = ptr.To(gatewayv1.Group("multicluster.x-k8s.io")) }),
			backendRef("hello", 80, func(r *gatewayv1.HTTPBackendRef) { r.Port = nil }),
		}}},
	}, {
		name:      "refs that are, spelled out",
		hostnames: []gatewayv1.Hostname{"hello.example.com"},
		rules: []gatewayv1.HTTPRouteRule{{BackendRefs: []gatewayv1.HTTPBackendRef{
			backendRef("hello", 80, func(r *gatewayv1.HTTPBackendRef) {
				r.Namespace, r.Kind, r.Group, r.Weight = ptr.To(gatewayv1.Namespace("shop")), ptr.To(gatewayv1.Kind("Service")), ptr.To(gatewayv1.Group("")), ptr.To[int32](1)
			}),
		}}},
		want: []hostClaim{{host: "hello.example.com", prefixes: []string{"/"}, source: "HTTPRoute/web"}},
	}, {
		name:    "no hostnames",
		rules:   []gatewayv1.HTTPRouteRule{{BackendRefs: []gatewayv1.HTTPBackendRef{hello}}},
		skipped: []string{"HTTPRoute/web: no hostnames (it matches every host its Gateway listeners take, which no app may claim)"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			hr := &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"},
				Spec: gatewayv1.HTTPRouteSpec{Hostnames: tc.hostnames, Rules: tc.rules}}
			got, skipped := httpRouteClaims(hr, helloPort)
			if d := cmp.Diff(tc.want, got, cmp.AllowUnexported(hostClaim{})); d != "" {
				t.Errorf("claims (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.skipped, skipped); d != "" {
				t.Errorf("skipped (-want +got):\n%s", d)
			}
			slimGot, slimSkipped := httpRouteClaims(httpRouteTransform(hr), helloPort)
			if d := cmp.Diff(got, slimGot, cmp.AllowUnexported(hostClaim{})); d != "" || !cmp.Equal(skipped, slimSkipped) {
				t.Errorf("the cached HTTPRoute says otherwise (-full +cached):\n%s%v", d, slimSkipped)
			}
		})
	}
}

// TestMergeHosts: claims of one host merge (every path wins over any
// prefix), hosts are lowercased and checked as the CRD checks them (one
// the CRD refuses is skipped, not the rest), both lists are sorted and
// bounded, and hostSources names every host's sources, the annotation's
// included.
func TestMergeHosts(t *testing.T) {
	claims := []hostClaim{
		{host: "API.example.com", prefixes: []string{"/v2", "/v1"}, source: "Ingress/b"},
		{host: "api.example.com", prefixes: []string{"/v1"}, source: "HTTPRoute/a"},
		{host: "www.example.com", prefixes: []string{"/x"}, source: "Ingress/b"},
		{host: "www.example.com", prefixes: []string{"/"}, source: "Ingress/c"},
		{host: "under_score.example.com", prefixes: []string{"/"}, source: "Ingress/c"},
		{host: "hello.example.com", prefixes: []string{"/"}, source: "Ingress/b"},
	}
	hostPaths, report := mergeHosts([]string{"hello.example.com", "only.example.com"}, "ebb.dev/hosts", claims, []string{"earlier"})
	want := []routingv1alpha1.HostPaths{
		{Host: "api.example.com", PathPrefixes: []string{"/v1", "/v2"}},
		{Host: "hello.example.com"},
		{Host: "www.example.com"},
	}
	if d := cmp.Diff(want, hostPaths); d != "" {
		t.Errorf("hostPaths (-want +got):\n%s", d)
	}
	wantSources := []routingv1alpha1.HostSource{
		{Host: "api.example.com", From: []string{"HTTPRoute/a", "Ingress/b"}},
		{Host: "hello.example.com", From: []string{"Ingress/b", "annotation ebb.dev/hosts"}},
		{Host: "only.example.com", From: []string{"annotation ebb.dev/hosts"}},
		{Host: "www.example.com", From: []string{"Ingress/b", "Ingress/c"}},
	}
	if d := cmp.Diff(wantSources, report.sources); d != "" {
		t.Errorf("sources (-want +got):\n%s", d)
	}
	wantSkipped := []string{"earlier", `Ingress/c: host "under_score.example.com" is not a DNS name or a wildcard of one leading label`}
	if d := cmp.Diff(wantSkipped, report.skipped); d != "" {
		t.Errorf("skipped (-want +got):\n%s", d)
	}

	// Bounds: the first 64 hosts and 16 prefixes, sorted, whatever the
	// order the claims came in.
	claims = nil
	for i := 70; i > 0; i-- {
		claims = append(claims, hostClaim{host: fmt.Sprintf("h%02d.example.com", i), prefixes: []string{"/"}, source: "Ingress/many"})
	}
	for i := 20; i > 0; i-- {
		claims = append(claims, hostClaim{host: "h01.example.com", prefixes: []string{fmt.Sprintf("/p%02d", i)}, source: "Ingress/paths"})
		claims = append(claims, hostClaim{host: "a-paths.example.com", prefixes: []string{fmt.Sprintf("/p%02d", i)}, source: "Ingress/paths"})
	}
	hostPaths, report = mergeHosts(nil, "ebb.dev/hosts", claims, nil)
	if len(hostPaths) != maxHostPaths || hostPaths[0].Host != "a-paths.example.com" || hostPaths[1].Host != "h01.example.com" || hostPaths[63].Host != "h63.example.com" {
		t.Errorf("%d hostPaths, first %s, last %s; want 64, a-paths, then h01 to h63", len(hostPaths), hostPaths[0].Host, hostPaths[len(hostPaths)-1].Host)
	}
	if p := hostPaths[0].PathPrefixes; len(p) != maxPathPrefixes || p[0] != "/p01" || p[15] != "/p16" {
		t.Errorf("a-paths' prefixes = %v; want /p01 to /p16", p)
	}
	if len(hostPaths[1].PathPrefixes) != 0 {
		t.Errorf("h01's every-path claim lost to its prefixes: %v", hostPaths[1].PathPrefixes)
	}
	if len(report.sources) != maxHostPaths {
		t.Errorf("%d host sources, want %d", len(report.sources), maxHostPaths)
	}
	wantSkipped = []string{
		"more than 64 hosts from Ingresses and HTTPRoutes: kept the first 64 (sorted), not h64.example.com, h65.example.com, h66.example.com, h67.example.com, h68.example.com, h69.example.com, h70.example.com",
		"host a-paths.example.com: more than 16 path prefixes: kept the first 16 (sorted), not /p17, /p18, /p19, /p20",
	}
	if d := cmp.Diff(wantSkipped, report.skipped); d != "" {
		t.Errorf("skipped (-want +got):\n%s", d)
	}
}

// TestHostPatternIsTheCRDs: the hosts mergeHosts takes are what the CRD
// takes, pattern and length.
func TestHostPatternIsTheCRDs(t *testing.T) {
	crd := readAppRouteCRD(t)
	for _, want := range []string{"pattern: " + hostPattern.String(), fmt.Sprintf("maxLength: %d", maxHostLength),
		fmt.Sprintf("maxItems: %d", maxHostPaths), fmt.Sprintf("maxItems: %d", maxPathPrefixes)} {
		if !strings.Contains(crd, want) {
			t.Errorf("the AppRoute CRD has no %q", want)
		}
	}
}

// TestIngressTransformKeepsOnlyRouting: the cached Ingress has no
// annotations, labels, managed fields, TLS or status.
func TestIngressTransformKeepsOnlyRouting(t *testing.T) {
	ing := &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", Generation: 3, ResourceVersion: "7",
			Annotations:   map[string]string{"kubectl.kubernetes.io/last-applied-configuration": strings.Repeat("x", 4096)},
			Labels:        map[string]string{"app": "web"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}},
		Spec: networkingv1.IngressSpec{IngressClassName: ptr.To("traefik"), TLS: []networkingv1.IngressTLS{{Hosts: []string{"a"}, SecretName: "s"}},
			Rules: []networkingv1.IngressRule{ingRule("a.example.com", ingPath("/", networkingv1.PathTypePrefix, "hello", byNumber))}},
		Status: networkingv1.IngressStatus{LoadBalancer: networkingv1.IngressLoadBalancerStatus{Ingress: []networkingv1.IngressLoadBalancerIngress{{IP: "10.0.0.1"}}}},
	}
	want := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", Generation: 3, ResourceVersion: "7"},
		Spec: networkingv1.IngressSpec{Rules: ing.Spec.Rules}}
	got, err := stripTransform(ing)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("cached Ingress (-want +got):\n%s", d)
	}
}

// appPortOf finds the name of the Service port carrying the app's traffic.
func TestAppPortOf(t *testing.T) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "hello"}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "metrics", Port: 9090}, {Name: "http", Port: 80}}}}
	if p, ok := appPortOf(svc, 80); !ok || p != helloPort {
		t.Errorf("appPortOf = %+v, %v; want %+v", p, ok, helloPort)
	}
	if _, ok := appPortOf(svc, 0); ok {
		t.Error("a route without a port has one")
	}
	if _, ok := appPortOf(nil, 80); ok {
		t.Error("a route without a Service has a port")
	}
}

func readAppRouteCRD(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repo.MustRoot(t), "config", "crd", "routing.ebb.dev_approutes.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestIngressPathsMatchByElementAtZero: two namespaces share
// shop.example.com through their Ingresses, team-a's (older) with /api,
// team-b's with /. Every Ingress controller sends /apiary to team-b's
// Service (Prefix matches by path element), so at zero the activator must
// hold it for team-b's app, not wake team-a's and hand it team-b's
// request. Exact /login is kept as a prefix of whole elements: /login/x
// is team-a's, /login-help team-b's.
func TestIngressPathsMatchByElementAtZero(t *testing.T) {
	route := func(ns string, created time.Time, path string, pt networkingv1.PathType) routing.Route[string] {
		ing := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
			Spec: networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{ingRule("shop.example.com", ingPath(path, pt, "hello", byNumber))}}}
		claims, _ := ingressClaims(ing, helloPort)
		hps, _ := mergeHosts(nil, "ebb.dev/hosts", claims, nil)
		return routing.Route[string]{Key: routing.Key{Namespace: ns, Name: "hello"}, Created: created, HostPaths: hostPaths(hps), Value: ns}
	}
	now := time.Now()
	for _, tc := range []struct {
		aPath       string
		aType       networkingv1.PathType
		req, wantNS string
	}{
		{"/api", networkingv1.PathTypePrefix, "/apiary", "team-b"},
		{"/api/", networkingv1.PathTypePrefix, "/apiary", "team-b"},
		{"/api/", networkingv1.PathTypePrefix, "/api", "team-a"},
		{"/api", networkingv1.PathTypeImplementationSpecific, "/apiary", "team-b"},
		{"/login", networkingv1.PathTypeExact, "/login-help", "team-b"},
		{"/login", networkingv1.PathTypeExact, "/login/x", "team-a"},
	} {
		tab := routing.Build([]routing.Route[string]{
			route("team-a", now.Add(-time.Hour), tc.aPath, tc.aType),
			route("team-b", now, "/", networkingv1.PathTypePrefix),
		}, nil)
		got := "none"
		if r, ok := tab.Lookup("shop.example.com", tc.req); ok {
			got = r.Value
		}
		if got != tc.wantNS {
			t.Errorf("team-a's %s %s: %s goes to %s's app; its Ingress sends it to %s's", tc.aType, tc.aPath, tc.req, got, tc.wantNS)
		}
	}
}

// TestImplementationSpecificPaths: GKE's Ingress writes every path as /*
// (and a subtree as /api/*), which ebb takes as / (and /api); an
// ImplementationSpecific path with regular-expression or glob characters
// (ingress-nginx's use-regex: /api(/|$)(.*)) is no path prefix: it is
// skipped and said, not claimed for a prefix no request starts with.
func TestImplementationSpecificPaths(t *testing.T) {
	is := networkingv1.PathTypeImplementationSpecific
	ing := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"}, Spec: networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{
		ingRule("gke.example.com", ingPath("/*", is, "hello", byNumber)),
		ingRule("sub.example.com", ingPath("/api/*", is, "hello", byNumber)),
		ingRule("nginx.example.com", ingPath("/api(/|$)(.*)", is, "hello", byNumber), ingPath("/.*", is, "hello", byNumber), ingPath("/v[12]", is, "hello", byNumber)),
		ingRule("plain.example.com", ingPath("/static/", is, "hello", byNumber)),
	}}}
	claims, skipped := ingressClaims(ing, helloPort)
	want := []hostClaim{
		{host: "gke.example.com", prefixes: []string{"/"}, source: "Ingress/web"},
		{host: "sub.example.com", prefixes: []string{"/api"}, source: "Ingress/web"},
		{host: "plain.example.com", prefixes: []string{"/static"}, source: "Ingress/web"},
	}
	if d := cmp.Diff(want, claims, cmp.AllowUnexported(hostClaim{})); d != "" {
		t.Errorf("claims (-want +got):\n%s", d)
	}
	wantSkipped := []string{
		`Ingress/web rule 3: ImplementationSpecific path "/api(/|$)(.*)" is a pattern (a regular expression or glob), not a path prefix: ebb routes by path prefix only`,
		`Ingress/web rule 3: ImplementationSpecific path "/.*" is a pattern (a regular expression or glob), not a path prefix: ebb routes by path prefix only`,
		`Ingress/web rule 3: ImplementationSpecific path "/v[12]" is a pattern (a regular expression or glob), not a path prefix: ebb routes by path prefix only`,
	}
	if d := cmp.Diff(wantSkipped, skipped); d != "" {
		t.Errorf("skipped (-want +got):\n%s", d)
	}
}

// TestDeletedRouteForgetsSkipped: the HostsSkipped event is sent when what
// a route skips changes; a deleted route's last note is dropped, so the
// replica keeps nothing of it, and a route made again under the same name
// is told what it skips.
func TestDeletedRouteForgetsSkipped(t *testing.T) {
	rec := events.NewFakeRecorder(10)
	r := &routeReconciler{recorder: rec}
	route := &routingv1alpha1.AppRoute{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "hello"}}
	skipped := []string{"Ingress/web rule 1: no host (it matches every host, which no app may claim)"}
	r.reportSkipped(route, skipped)
	r.reportSkipped(route, skipped)
	if n := len(rec.Events); n != 1 {
		t.Fatalf("%d events for one change of what is skipped, want 1", n)
	}
	<-rec.Events
	r.forgetSkipped(context.Background(), event.DeleteEvent{Object: route}, nil)
	left := 0
	r.skipped.Range(func(any, any) bool { left++; return true })
	if left != 0 {
		t.Errorf("%d notes kept after the route was deleted", left)
	}
	r.reportSkipped(route, skipped)
	if n := len(rec.Events); n != 1 {
		t.Errorf("the route made again got %d HostsSkipped events, want 1", n)
	}
}
