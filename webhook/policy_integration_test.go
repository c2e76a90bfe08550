package webhook_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/staticanswer"
	"github.com/ebb-dev/ebb/internal/testwait"
	"github.com/ebb-dev/ebb/webhook/inject/injecttest"
)

// typedClient is a client that knows the ebb.dev instance's types.
func typedClient(t *testing.T) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := routingv1alpha1.AddToScheme(scheme, ebbNames.Group()); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// sidecarEnv is the environment of pod's sidecar as its process gets it
// (after the kubelet's expansion), by name.
func sidecarEnv(t *testing.T, pod *corev1.Pod) map[string]string {
	t.Helper()
	for i := range pod.Spec.InitContainers {
		if c := &pod.Spec.InitContainers[i]; c.Name == "ebb-sidecar" {
			return injecttest.ContainerEnv(c)
		}
	}
	t.Fatalf("pod %s has no sidecar", pod.Name)
	return nil
}

// TestRouteControls: the route-control annotations reach the AppRoute's
// spec and the sidecar's environment; the fallback's FallbackReady
// follows its Service.
func TestRouteControls(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	c, _ := newClient(t)
	ns := "controls"
	makeNamespace(t, c, ns, map[string]string{"ebb.dev/inject": "enabled"})
	ann := map[string]string{"ebb.dev/request-timeout": "5m", "ebb.dev/response-header-timeout": "1m", "ebb.dev/stream-idle-timeout": "10m",
		"ebb.dev/concurrency": "1", "ebb.dev/concurrency-queue": "20", "ebb.dev/fallback": "sorry:8080"}
	d, podTmpl := deploymentChain(t, c, ns, "slow", appTemplate(map[string]string{"ebb.dev/app": "slow"}, ann), 1)
	var route *routingv1alpha1.AppRoute
	testwait.Check(t, 10*time.Second, func() error {
		var err error
		route, err = getRoute(ctx, c, ebbNames, ns, "slow")
		return err
	})
	want := routingv1alpha1.AppRouteSpec{
		ScaleTargetRef: routingv1alpha1.ScaleTargetReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "slow"},
		AppPort:        8080, AppPortName: "http",
		RequestTimeout:        &metav1.Duration{Duration: 5 * time.Minute},
		ResponseHeaderTimeout: &metav1.Duration{Duration: time.Minute},
		StreamIdleTimeout:     &metav1.Duration{Duration: 10 * time.Minute},
		Concurrency:           1,
		// No spec.fallback until its Service is ready (FallbackReady True).
	}
	if diff := cmp.Diff(want, route.Spec); diff != "" {
		t.Errorf("spec (-want +got):\n%s", diff)
	}
	pod, err := createPod(ctx, c, ns, "slow-1", podTmpl)
	if err != nil {
		t.Fatal(err)
	}
	got := sidecarEnv(t, pod)
	for k, v := range map[string]string{"EBB_REQUEST_TIMEOUT": "5m0s", "EBB_RESPONSE_HEADER_TIMEOUT": "1m0s", "EBB_STREAM_IDLE_TIMEOUT": "10m0s",
		"EBB_CONCURRENCY": "1", "EBB_CONCURRENCY_QUEUE": "20"} {
		if got[k] != v {
			t.Errorf("sidecar %s = %q, want %q", k, got[k], v)
		}
	}
	if _, ok := got["EBB_STATIC_RESPONSES"]; ok {
		t.Errorf("sidecar has EBB_STATIC_RESPONSES without a RoutePolicy")
	}

	// The fallback Service: missing, then on another port, then right.
	testwait.Check(t, 10*time.Second, func() error {
		return wantCondition(ctx, c, ns, "slow", routingv1alpha1.ConditionFallbackReady, metav1.ConditionFalse, "ServiceNotFound")
	})
	sorry := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sorry"}, Spec: corev1.ServiceSpec{
		Selector: map[string]string{"app": "sorry"}, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}}
	if err := c.Create(ctx, sorry); err != nil {
		t.Fatal(err)
	}
	testwait.Check(t, 10*time.Second, func() error {
		if err := wantCondition(ctx, c, ns, "slow", routingv1alpha1.ConditionFallbackReady, metav1.ConditionFalse, "NoSuchPort"); err != nil {
			return err
		}
		r, err := getRoute(ctx, c, ebbNames, ns, "slow")
		if err != nil {
			return err
		}
		if msg := meta.FindStatusCondition(r.Status.Conditions, routingv1alpha1.ConditionFallbackReady).Message; !strings.Contains(msg, "has no TCP port 8080 (its TCP ports: 80); set ebb.dev/fallback to sorry:<one of them>") {
			return fmt.Errorf("FallbackReady message %q", msg)
		}
		return nil
	})
	sorry.Spec.Ports = append(sorry.Spec.Ports, corev1.ServicePort{Name: "alt", Port: 8080})
	sorry.Spec.Ports[0].Name = "web"
	if err := c.Update(ctx, sorry); err != nil {
		t.Fatal(err)
	}
	testwait.Check(t, 10*time.Second, func() error {
		if err := wantCondition(ctx, c, ns, "slow", routingv1alpha1.ConditionFallbackReady, metav1.ConditionTrue, "ServiceFound"); err != nil {
			return err
		}
		r, err := getRoute(ctx, c, ebbNames, ns, "slow")
		if err != nil {
			return err
		}
		if want := (routingv1alpha1.ServiceReference{Name: "sorry", Port: 8080}); r.Spec.Fallback == nil || *r.Spec.Fallback != want {
			return fmt.Errorf("spec.fallback %v, want %+v", r.Spec.Fallback, want)
		}
		return nil
	})

	// No fallback: no condition.
	var cur = d.DeepCopy()
	if err := c.Get(ctx, client.ObjectKeyFromObject(d), cur); err != nil {
		t.Fatal(err)
	}
	delete(cur.Spec.Template.Annotations, "ebb.dev/fallback")
	if err := c.Update(ctx, cur); err != nil {
		t.Fatal(err)
	}
	testwait.Check(t, 10*time.Second, func() error {
		r, err := getRoute(ctx, c, ebbNames, ns, "slow")
		if err != nil {
			return err
		}
		if r.Spec.Fallback != nil || meta.FindStatusCondition(r.Status.Conditions, routingv1alpha1.ConditionFallbackReady) != nil {
			return fmt.Errorf("fallback %v, conditions %v; want neither", r.Spec.Fallback, r.Status.Conditions)
		}
		return nil
	})
}

// policy is a RoutePolicy of the ebb.dev instance.
func policy(ns, name, app string, mods ...func(*routingv1alpha1.RoutePolicy)) *routingv1alpha1.RoutePolicy {
	p := &routingv1alpha1.RoutePolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: routingv1alpha1.GroupVersion(ebbNames.Group()).String(), Kind: routingv1alpha1.RoutePolicyKind},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       routingv1alpha1.RoutePolicySpec{App: app},
	}
	for _, m := range mods {
		m(p)
	}
	return p
}

// healthz is a static answer for a load balancer's health check.
func healthz(p *routingv1alpha1.RoutePolicy) {
	p.Spec.StaticResponses = append(p.Spec.StaticResponses, routingv1alpha1.StaticResponse{
		Name:     "healthz",
		Match:    routingv1alpha1.StaticMatch{Path: &routingv1alpha1.PathMatch{Type: routingv1alpha1.PathMatchExact, Value: "/healthz"}, Method: "GET"},
		Response: routingv1alpha1.StaticAnswer{Body: "ok"},
	})
}

func wantAccepted(ctx context.Context, c client.Client, ns, name string, status metav1.ConditionStatus, reason, message string) error {
	var p routingv1alpha1.RoutePolicy
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &p); err != nil {
		return err
	}
	cond := meta.FindStatusCondition(p.Status.Conditions, routingv1alpha1.ConditionAccepted)
	if cond == nil || cond.Status != status || cond.Reason != reason || !strings.Contains(cond.Message, message) || p.Status.ObservedGeneration != p.Generation {
		return fmt.Errorf("RoutePolicy %s: Accepted %+v, observedGeneration %d of %d; want %s/%s with %q", name, cond, p.Status.ObservedGeneration, p.Generation, status, reason, message)
	}
	return nil
}

// TestRoutePolicy: an app's RoutePolicy reaches its AppRoute (static
// responses as written, the placeholder with its page from the ConfigMap,
// the policy's name) and the sidecars of the pods admitted after it; the
// page follows the ConfigMap; a missing ConfigMap, a younger second policy
// and a policy naming no app each say so in Accepted.
func TestRoutePolicy(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	c := typedClient(t)
	ns := "policy"
	makeNamespace(t, c, ns, map[string]string{"ebb.dev/inject": "enabled"})
	_, podTmpl := deploymentChain(t, c, ns, "hello", appTemplate(map[string]string{"ebb.dev/app": "hello"}, nil), 0)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "waiting"}, Data: map[string]string{"page.html": "<p>waking up</p>", "other": "x"}}
	if err := c.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	first := policy(ns, "hello", "hello", healthz, func(p *routingv1alpha1.RoutePolicy) {
		p.Spec.Placeholder = &routingv1alpha1.PlaceholderSource{Headers: []routingv1alpha1.HTTPHeader{{Name: "Refresh", Value: "2"}},
			ConfigMapKeyRef: routingv1alpha1.ConfigMapKeyRef{Name: "waiting", Key: "page.html"}}
	})
	if err := c.Create(ctx, first); err != nil {
		t.Fatal(err)
	}
	wantStatic := []routingv1alpha1.StaticResponse{{Name: "healthz", When: "AtZero",
		Match:    routingv1alpha1.StaticMatch{Path: &routingv1alpha1.PathMatch{Type: "Exact", Value: "/healthz"}, Method: "GET"},
		Response: routingv1alpha1.StaticAnswer{Status: 200, Body: "ok"}}}
	wantPage := func(body string) *routingv1alpha1.Placeholder {
		return &routingv1alpha1.Placeholder{Status: 503, Headers: []routingv1alpha1.HTTPHeader{{Name: "Refresh", Value: "2"}}, Body: body}
	}
	routeHas := func(static []routingv1alpha1.StaticResponse, ph *routingv1alpha1.Placeholder, pol string) func() error {
		return func() error {
			var r routingv1alpha1.AppRoute
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "hello"}, &r); err != nil {
				return err
			}
			if diff := cmp.Diff(static, r.Spec.StaticResponses); diff != "" {
				return fmt.Errorf("staticResponses (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(ph, r.Spec.Placeholder); diff != "" {
				return fmt.Errorf("placeholder (-want +got):\n%s", diff)
			}
			if r.Spec.Policy != pol {
				return fmt.Errorf("policy %q, want %q", r.Spec.Policy, pol)
			}
			return nil
		}
	}
	testwait.Check(t, 10*time.Second, routeHas(wantStatic, wantPage("<p>waking up</p>"), "hello"))
	testwait.Check(t, 10*time.Second, func() error {
		return wantAccepted(ctx, c, ns, "hello", metav1.ConditionTrue, "Accepted", "copied into AppRoute hello")
	})

	// A pod admitted now: its sidecar answers the rules, in the form the
	// sidecar's own parser takes.
	pod, err := createPod(ctx, c, ns, "hello-1", podTmpl)
	if err != nil {
		t.Fatal(err)
	}
	static := sidecarEnv(t, pod)["EBB_STATIC_RESPONSES"]
	set, err := staticanswer.Parse(static)
	if err != nil || set == nil {
		t.Fatalf("EBB_STATIC_RESPONSES %q: staticanswer.Parse = %v, %v", static, set, err)
	}
	if r := set.Match("GET", "/healthz", nil); r == nil || r.Name != "healthz" || r.Body != "ok" {
		t.Errorf("EBB_STATIC_RESPONSES %q: GET /healthz matches %+v", static, r)
	}
	var rules []staticanswer.Rule
	if err := json.Unmarshal([]byte(static), &rules); err != nil || len(rules) != 1 {
		t.Errorf("EBB_STATIC_RESPONSES %q: %d rules, %v", static, len(rules), err)
	}

	// The page follows its ConfigMap.
	cm.Data["page.html"] = "<p>almost there</p>"
	if err := c.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	testwait.Check(t, 10*time.Second, routeHas(wantStatic, wantPage("<p>almost there</p>"), "hello"))

	// The ConfigMap gone: no placeholder, and the policy says why.
	if err := c.Delete(ctx, cm); err != nil {
		t.Fatal(err)
	}
	testwait.Check(t, 10*time.Second, routeHas(wantStatic, nil, "hello"))
	testwait.Check(t, 10*time.Second, func() error {
		return wantAccepted(ctx, c, ns, "hello", metav1.ConditionFalse, "PlaceholderUnavailable",
			`spec.placeholder: ConfigMap waiting not found in namespace policy; create it with the page under key "page.html"`)
	})
	// Back with the page under another key.
	cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "waiting"}, Data: map[string]string{"index.html": "<p>hi</p>"}}
	if err := c.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	testwait.Check(t, 10*time.Second, func() error {
		return wantAccepted(ctx, c, ns, "hello", metav1.ConditionFalse, "PlaceholderUnavailable", `ConfigMap waiting has no key "page.html" in its data`)
	})
	cm.Data["page.html"] = strings.Repeat("x", routingv1alpha1.MaxPlaceholderBodySize+1)
	if err := c.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	testwait.Check(t, 10*time.Second, func() error {
		return wantAccepted(ctx, c, ns, "hello", metav1.ConditionFalse, "PlaceholderUnavailable", `key "page.html" of ConfigMap waiting holds 65537 bytes, more than 65536`)
	})
	cm.Data["page.html"] = "<p>back</p>"
	if err := c.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	testwait.Check(t, 10*time.Second, routeHas(wantStatic, wantPage("<p>back</p>"), "hello"))
	testwait.Check(t, 10*time.Second, func() error {
		return wantAccepted(ctx, c, ns, "hello", metav1.ConditionTrue, "Accepted", "")
	})

	// A second policy for the app: the younger is superseded, the route
	// keeps the older's, until the older goes.
	time.Sleep(time.Second) // creation timestamps have a resolution of a second
	second := policy(ns, "hello-too", "hello", func(p *routingv1alpha1.RoutePolicy) {
		p.Spec.StaticResponses = []routingv1alpha1.StaticResponse{{Name: "ping", Match: routingv1alpha1.StaticMatch{Path: &routingv1alpha1.PathMatch{Value: "/ping"}},
			When: "Always", Response: routingv1alpha1.StaticAnswer{Status: 204}}}
	})
	if err := c.Create(ctx, second); err != nil {
		t.Fatal(err)
	}
	testwait.Check(t, 10*time.Second, func() error {
		return wantAccepted(ctx, c, ns, "hello-too", metav1.ConditionFalse, "Superseded", "RoutePolicy hello names app hello too and is older")
	})
	testwait.Check(t, 10*time.Second, routeHas(wantStatic, wantPage("<p>back</p>"), "hello"))
	if err := c.Delete(ctx, first); err != nil {
		t.Fatal(err)
	}
	wantPing := []routingv1alpha1.StaticResponse{{Name: "ping", When: "Always",
		Match:    routingv1alpha1.StaticMatch{Path: &routingv1alpha1.PathMatch{Type: "PathPrefix", Value: "/ping"}},
		Response: routingv1alpha1.StaticAnswer{Status: 204}}}
	testwait.Check(t, 10*time.Second, routeHas(wantPing, nil, "hello-too"))
	testwait.Check(t, 10*time.Second, func() error {
		return wantAccepted(ctx, c, ns, "hello-too", metav1.ConditionTrue, "Accepted", "")
	})

	// A policy naming no app.
	if err := c.Create(ctx, policy(ns, "typo", "helo", healthz)); err != nil {
		t.Fatal(err)
	}
	testwait.Check(t, 10*time.Second, func() error {
		return wantAccepted(ctx, c, ns, "typo", metav1.ConditionFalse, "NoSuchApp", "no app helo in namespace policy (no AppRoute helo): set spec.app to the ebb.dev/app label")
	})
}

// TestRoutePolicyRefused: the API server refuses a RoutePolicy past the
// bounds with a message naming the field and the fix.
func TestRoutePolicyRefused(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	c := typedClient(t)
	ns := "policy-refused"
	makeNamespace(t, c, ns, nil)
	rule := func(name string, mods ...func(*routingv1alpha1.StaticResponse)) routingv1alpha1.StaticResponse {
		r := routingv1alpha1.StaticResponse{Name: name, Match: routingv1alpha1.StaticMatch{Path: &routingv1alpha1.PathMatch{Value: "/" + name}}}
		for _, m := range mods {
			m(&r)
		}
		return r
	}
	for _, tc := range []struct {
		name  string
		rules []routingv1alpha1.StaticResponse
		want  []string
	}{{
		name: "a framing header",
		rules: []routingv1alpha1.StaticResponse{rule("healthz", func(r *routingv1alpha1.StaticResponse) {
			r.Response.Headers = []routingv1alpha1.HTTPHeader{{Name: "Content-Length", Value: "2"}}
		})},
		want: []string{"spec.staticResponses[0].response.headers", "ebb writes the framing itself; remove Content-Length"},
	}, {
		name: "a 17th rule",
		rules: func() []routingv1alpha1.StaticResponse {
			var rs []routingv1alpha1.StaticResponse
			for i := range 17 {
				rs = append(rs, rule(fmt.Sprintf("r%d", i)))
			}
			return rs
		}(),
		want: []string{"spec.staticResponses", "must have at most 16 items"},
	}, {
		name: "a path with ..",
		rules: []routingv1alpha1.StaticResponse{rule("healthz", func(r *routingv1alpha1.StaticResponse) {
			r.Match.Path.Value = "/a/../healthz"
		})},
		want: []string{"spec.staticResponses[0].match.path.value", "path.value: an absolute path starting with /, without a query, a fragment, an empty segment, . or .."},
	}, {
		name: "a percent-encoded path",
		rules: []routingv1alpha1.StaticResponse{rule("healthz", func(r *routingv1alpha1.StaticResponse) {
			r.Match.Path.Value = "/health%7A"
		})},
		want: []string{"spec.staticResponses[0].match.path.value", "without percent-encoding", "write the plain path, such as /healthz"},
	}, {
		name: "a path with a ';' parameter",
		rules: []routingv1alpha1.StaticResponse{rule("healthz", func(r *routingv1alpha1.StaticResponse) {
			r.Match.Path.Value = "/healthz;v=1"
		})},
		want: []string{"spec.staticResponses[0].match.path.value", "a ';'", "write the plain path, such as /healthz"},
	}, {
		name: "a 5000-byte body",
		rules: []routingv1alpha1.StaticResponse{rule("healthz", func(r *routingv1alpha1.StaticResponse) {
			r.Response.Body = strings.Repeat("x", 5000)
		})},
		want: []string{"spec.staticResponses[0].response.body", "4096"},
	}, {
		name: "a 4096-character body of 8192 bytes",
		rules: []routingv1alpha1.StaticResponse{rule("healthz", func(r *routingv1alpha1.StaticResponse) {
			r.Response.Body = strings.Repeat("é", 4096)
		})},
		want: []string{"spec.staticResponses[0].response.body", "at most 4096 bytes (UTF-8); shorten it"},
	}, {
		name: "a body on a 204",
		rules: []routingv1alpha1.StaticResponse{rule("healthz", func(r *routingv1alpha1.StaticResponse) {
			r.Response.Status, r.Response.Body = 204, "ok"
		})},
		want: []string{"spec.staticResponses[0].response", "a 204 or 304 answer has no body; remove the body or choose another status"},
	}, {
		name: "a header matched twice",
		rules: []routingv1alpha1.StaticResponse{rule("healthz", func(r *routingv1alpha1.StaticResponse) {
			r.Match.Headers = []routingv1alpha1.HTTPHeader{{Name: "X-Probe", Value: "1"}, {Name: "x-probe", Value: "2"}}
		})},
		want: []string{"spec.staticResponses[0].match.headers", "a header name is given twice"},
	}, {
		name: "a header value with a trailing space",
		rules: []routingv1alpha1.StaticResponse{rule("healthz", func(r *routingv1alpha1.StaticResponse) {
			r.Response.Headers = []routingv1alpha1.HTTPHeader{{Name: "Cache-Control", Value: "no-store "}}
		})},
		want: []string{"spec.staticResponses[0].response.headers[0].value", "no space at its start or end"},
	}, {
		name: "more than 16 KiB in all",
		rules: func() []routingv1alpha1.StaticResponse {
			var rs []routingv1alpha1.StaticResponse
			for i := range 5 {
				rs = append(rs, rule(fmt.Sprintf("r%d", i), func(r *routingv1alpha1.StaticResponse) { r.Response.Body = strings.Repeat("x", 4000) }))
			}
			return rs
		}(),
		want: []string{"spec.staticResponses", "their bodies and headers come to more than 16384 bytes in all"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			err := c.Create(ctx, policy(ns, "bad", "hello", func(p *routingv1alpha1.RoutePolicy) { p.Spec.StaticResponses = tc.rules }))
			if !apierrors.IsInvalid(err) {
				t.Fatalf("create = %v, want Invalid", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("message %q\nlacks %q", err.Error(), w)
				}
			}
		})
	}
	// A policy at the bounds is taken.
	ok := policy(ns, "good", "hello", func(p *routingv1alpha1.RoutePolicy) {
		for i := range 16 {
			p.Spec.StaticResponses = append(p.Spec.StaticResponses, rule(fmt.Sprintf("r%d", i), func(r *routingv1alpha1.StaticResponse) {
				r.Response.Body = strings.Repeat("é", 512) // 1 KiB
			}))
		}
	})
	if err := c.Create(ctx, ok); err != nil {
		t.Fatalf("a policy at the bounds: %v", err)
	}
}
