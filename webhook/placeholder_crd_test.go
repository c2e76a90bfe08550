package webhook_test

import (
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
)

// TestPlaceholderRefusedByTheCRDs: a placeholder page is a body, so its
// status may not be 204 or 304 (the activator wrote the body after such a
// head, and a pooled connection read it as the next response), in a
// RoutePolicy and in an AppRoute written by hand; and an AppRoute's page
// may not set framing headers, as a RoutePolicy's may not. Each refusal
// names the field and the fix.
func TestPlaceholderRefusedByTheCRDs(t *testing.T) {
	needEnv(t)
	c, _ := newClient(t)
	ns := "placeholder-crd"
	makeNamespace(t, c, ns, nil)
	route := func(name string, placeholder map[string]any) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{
			"metadata": map[string]any{"namespace": ns, "name": name},
			"spec": map[string]any{
				"hosts":          []any{name + ".example.com"},
				"service":        map[string]any{"name": name, "port": int64(80)},
				"scaleTargetRef": map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
				"appPort":        int64(8080),
				"placeholder":    placeholder,
			},
		}}
		u.SetGroupVersionKind(routingv1alpha1.GroupVersion(ebbNames.Group()).WithKind(routingv1alpha1.Kind))
		return u
	}
	policy := func(name string, status int64) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{
			"metadata": map[string]any{"namespace": ns, "name": name},
			"spec": map[string]any{
				"app": name,
				"placeholder": map[string]any{
					"status":          status,
					"configMapKeyRef": map[string]any{"name": "pages", "key": "waking.html"},
				},
			},
		}}
		u.SetGroupVersionKind(routingv1alpha1.GroupVersion(ebbNames.Group()).WithKind(routingv1alpha1.RoutePolicyKind))
		return u
	}
	smuggled := "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nforged"
	for _, tc := range []struct {
		name string
		obj  *unstructured.Unstructured
		want []string // nil: accepted
	}{
		{"route-204", route("route-204", map[string]any{"status": int64(204), "body": smuggled}),
			[]string{"spec.placeholder.status", "a 204 or 304 answer has no body", "choose another status, such as 503"}},
		{"route-304", route("route-304", map[string]any{"status": int64(304), "body": smuggled}),
			[]string{"spec.placeholder.status", "a 204 or 304 answer has no body"}},
		{"route-101", route("route-101", map[string]any{"status": int64(101), "body": smuggled}),
			[]string{"spec.placeholder.status", "greater than or equal to 200"}},
		{"route-transfer-encoding", route("route-te", map[string]any{"status": int64(503), "body": "<p>waking</p>",
			"headers": []any{map[string]any{"name": "Transfer-Encoding", "value": "chunked"}}}),
			[]string{"spec.placeholder.headers", "ebb writes the framing itself; remove Content-Length, Transfer-Encoding"}},
		{"route-ok", route("route-ok", map[string]any{"status": int64(503), "body": "<p>waking</p>",
			"headers": []any{map[string]any{"name": "Refresh", "value": "2"}}}), nil},
		{"policy-204", policy("policy-204", 204),
			[]string{"spec.placeholder.status", "placeholder.status: a 204 or 304 answer has no body", "choose another status, such as 503"}},
		{"policy-304", policy("policy-304", 304),
			[]string{"spec.placeholder.status", "a 204 or 304 answer has no body"}},
		{"policy-ok", policy("policy-ok", 200), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := c.Create(t.Context(), tc.obj)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !apierrors.IsInvalid(err) {
				t.Fatalf("got %v, want Invalid", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the refusal %q does not say %q", err.Error(), w)
				}
			}
		})
	}
}
