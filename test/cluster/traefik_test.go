package cluster_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"github.com/ebb-dev/ebb/test/cluster"
)

// throughTraefik sends GET / for host to Traefik's web entrypoint on a new
// connection and returns the status and body.
func throughTraefik(ctx context.Context, host string) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+lc.TraefikAddr+"/", nil)
	if err != nil {
		return 0, "", err
	}
	req.Host = host
	resp, err := freshConn.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// waitServedByPod waits until a request for host through Traefik is
// answered 200 by the pod itself ("hello from <pod>"), and returns how long
// that took.
func waitServedByPod(t *testing.T, host, pod string) time.Duration {
	t.Helper()
	begin := time.Now()
	want := "hello from " + pod
	var status int
	var body string
	var err error
	if werr := cluster.WaitFor(t.Context(), 30*time.Second, "Traefik serving "+host+" from pod "+pod, func(ctx context.Context) (bool, error) {
		status, body, err = throughTraefik(ctx, host)
		return err == nil && status == http.StatusOK && strings.TrimSpace(body) == want, nil
	}); werr != nil {
		t.Fatalf("%v; last answer: %d %q %v", werr, status, body, err)
	}
	return time.Since(begin)
}

// TestTraefikRoutesIngressAndHTTPRoute shows the cluster's Traefik acting as
// a stock install does: an Ingress with no class (the API server gives it
// the default class, Traefik's) and an HTTPRoute attached to Traefik's
// Gateway each route their host to a plain Deployment's pod; Traefik writes
// their status as their controller (so its ServiceAccount's permissions
// suffice), answers 404 for a host no route names, and counts the requests
// on its metrics endpoint.
func TestTraefikRoutesIngressAndHTTPRoute(t *testing.T) {
	ctx := t.Context()
	const ns, name = "foundation-traefik", "web"
	const ingressHost, routeHost = "ingress.traefik.test", "route.traefik.test"
	createNamespace(t, ns)
	if _, err := lc.Client.AppsV1().Deployments(ns).Create(ctx, testAppDeployment(ns, name, 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := lc.Client.CoreV1().Services(ns).Create(ctx, service(ns, name), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cluster.WaitFor(ctx, 60*time.Second, "1 ready endpoint", func(ctx context.Context) (bool, error) {
		n, err := lc.ReadyEndpoints(ctx, ns, name)
		return n == 1, err
	}); err != nil {
		t.Fatal(err)
	}
	pods := podsOf(t, ns, name)
	if len(pods) != 1 {
		t.Fatalf("got %d pods, want 1", len(pods))
	}
	pod := pods[0].Name

	// No route names the host yet: Traefik's own 404.
	if status, body, err := throughTraefik(ctx, ingressHost); err != nil || status != http.StatusNotFound {
		t.Fatalf("before any route, GET %s through Traefik = %d %q %v, want 404", ingressHost, status, body, err)
	}

	prefix := networkingv1.PathTypePrefix
	ing, err := lc.Client.NetworkingV1().Ingresses(ns).Create(ctx, &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{{
			Host: ingressHost,
			IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{{
				Path: "/", PathType: &prefix,
				Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{
					Name: name, Port: networkingv1.ServiceBackendPort{Name: "http"},
				}},
			}}}},
		}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := ptr.Deref(ing.Spec.IngressClassName, ""); got != cluster.TraefikIngressClass {
		t.Errorf("Ingress created without a class got class %q, want the default %q", got, cluster.TraefikIngressClass)
	}
	t.Logf("Ingress created → %s served by the pod through Traefik in %s", ingressHost, waitServedByPod(t, ingressHost, pod).Round(time.Millisecond))
	if err := cluster.WaitFor(ctx, 30*time.Second, "the Ingress's status address written by Traefik", func(ctx context.Context) (bool, error) {
		ing, err := lc.Client.NetworkingV1().Ingresses(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		lb := ing.Status.LoadBalancer.Ingress
		return len(lb) == 1 && lb[0].IP == lc.NodeIP, nil
	}); err != nil {
		t.Error(err)
	}

	dyn, err := dynamic.NewForConfig(lc.RestConfig)
	if err != nil {
		t.Fatal(err)
	}
	routes := dyn.Resource(cluster.HTTPRoutes).Namespace(ns)
	if _, err := routes.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": cluster.GatewayAPIGroup + "/v1", "kind": "HTTPRoute",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{
			"parentRefs": []any{map[string]any{"name": cluster.TraefikGateway, "namespace": cluster.TraefikNamespace, "sectionName": cluster.TraefikListener}},
			"hostnames":  []any{routeHost},
			"rules": []any{map[string]any{
				"backendRefs": []any{map[string]any{"name": name, "port": int64(80)}},
			}},
		},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Logf("HTTPRoute created → %s served by the pod through Traefik in %s", routeHost, waitServedByPod(t, routeHost, pod).Round(time.Millisecond))
	var parents []any
	if err := cluster.WaitFor(ctx, 30*time.Second, "the HTTPRoute Accepted with its refs resolved by Traefik", func(ctx context.Context) (bool, error) {
		r, err := routes.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		parents, _, _ = unstructured.NestedSlice(r.Object, "status", "parents")
		if len(parents) != 1 {
			return false, nil
		}
		p := parents[0].(map[string]any)
		conds, _ := p["conditions"].([]any)
		got := map[string]any{"controllerName": p["controllerName"], "conditions": conditionStatuses(conds, "Accepted", "ResolvedRefs")}
		want := map[string]any{"controllerName": "traefik.io/gateway-controller", "conditions": map[string]string{"Accepted": "True", "ResolvedRefs": "True"}}
		return cmp.Diff(want, got) == "", nil
	}); err != nil {
		t.Errorf("%v; status.parents: %v", err, parents)
	}

	// Each host is routed by its own object only.
	if status, body, err := throughTraefik(ctx, "nothing.traefik.test"); err != nil || status != http.StatusNotFound {
		t.Errorf("GET nothing.traefik.test through Traefik = %d %q %v, want 404", status, body, err)
	}

	// Traefik counted the requests on its web entrypoint.
	metrics, err := get(ctx, lc.TraefikMetricsURL)
	if err != nil {
		t.Fatal(err)
	}
	if want := `traefik_entrypoint_requests_total{code="200",entrypoint="web",method="GET",protocol="http"}`; !strings.Contains(metrics, want) {
		t.Errorf("Traefik's metrics at %s lack %s", lc.TraefikMetricsURL, want)
	}
}

// conditionStatuses maps the given types of an unstructured condition list
// to their statuses.
func conditionStatuses(conds []any, types ...string) map[string]string {
	m := map[string]string{}
	for _, c := range conds {
		c, _ := c.(map[string]any)
		if typ, _ := c["type"].(string); slices.Contains(types, typ) {
			m[typ] = fmt.Sprint(c["status"])
		}
	}
	return m
}
