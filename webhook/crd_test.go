package webhook_test

import (
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
)

// TestAppRouteColdStartTimeoutCeiling: an AppRoute written by hand (not by
// the webhook from the annotation) is held to the one cold-start ceiling
// by its CRD: above 0s and at most 15m.
func TestAppRouteColdStartTimeoutCeiling(t *testing.T) {
	needEnv(t)
	c, _ := newClient(t)
	ns := "ceiling"
	makeNamespace(t, c, ns, nil)
	for name, tc := range map[string]struct {
		timeout string
		ok      bool
	}{
		"at-the-ceiling":    {"15m", true},
		"one-past":          {"15m1ms", false},
		"an-hour":           {"1h", false},
		"zero":              {"0s", false},
		"a-millisecond":     {"1ms", true},
		"in-go-s-own-words": {"2m0s", true},
	} {
		t.Run(name, func(t *testing.T) {
			u := &unstructured.Unstructured{Object: map[string]any{
				"metadata": map[string]any{"namespace": ns, "name": name},
				"spec": map[string]any{
					"hosts":            []any{name + ".example.com"},
					"service":          map[string]any{"name": name, "port": int64(80)},
					"scaleTargetRef":   map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
					"appPort":          int64(8080),
					"coldStartTimeout": tc.timeout,
				},
			}}
			u.SetGroupVersionKind(routingv1alpha1.GroupVersion(ebbNames.Group()).WithKind(routingv1alpha1.Kind))
			err := c.Create(t.Context(), u)
			switch {
			case tc.ok && err != nil:
				t.Fatalf("coldStartTimeout %s refused: %v", tc.timeout, err)
			case !tc.ok && (!apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "coldStartTimeout: want above 0s and at most 15m")):
				t.Fatalf("coldStartTimeout %s: got %v, want Invalid for the ceiling", tc.timeout, err)
			}
		})
	}
}
