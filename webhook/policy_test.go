package webhook

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/staticanswer"
)

// TestStaticRules: a RoutePolicy's static responses become the data path's
// rules field by field, and what the data path refuses is an error.
func TestStaticRules(t *testing.T) {
	in := []routingv1alpha1.StaticResponse{{
		Name: "healthz", When: "Always",
		Match: routingv1alpha1.StaticMatch{Path: &routingv1alpha1.PathMatch{Type: "Exact", Value: "/healthz"}, Method: "GET",
			Headers: []routingv1alpha1.HTTPHeader{{Name: "User-Agent", Value: "ELB-HealthChecker/2.0"}}},
		Response: routingv1alpha1.StaticAnswer{Status: 200, Headers: []routingv1alpha1.HTTPHeader{{Name: "Cache-Control", Value: "no-store"}}, Body: "<ok>"},
	}, {
		Name: "any", Response: routingv1alpha1.StaticAnswer{Status: 204},
	}}
	got, err := StaticRules(in)
	if err != nil {
		t.Fatal(err)
	}
	want := []staticanswer.Rule{{
		Name: "healthz", When: "Always", PathType: "Exact", Path: "/healthz", Method: "GET",
		Headers: []staticanswer.Header{{Name: "User-Agent", Value: "ELB-HealthChecker/2.0"}},
		Status:  200, ResponseHeaders: []staticanswer.Header{{Name: "Cache-Control", Value: "no-store"}}, Body: "<ok>",
	}, {Name: "any", Status: 204}}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreUnexported(staticanswer.Rule{})); diff != "" {
		t.Errorf("StaticRules (-want +got):\n%s", diff)
	}
	js, err := staticJSON(&routingv1alpha1.RoutePolicy{Spec: routingv1alpha1.RoutePolicySpec{StaticResponses: in}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(js, `"body":"<ok>"`) || strings.HasSuffix(js, "\n") {
		t.Errorf("staticJSON = %q: want the body's < and > as they are, no trailing newline", js)
	}
	if set, err := staticanswer.Parse(js); err != nil || set.Match("GET", "/healthz", func(string) (string, bool) { return "ELB-HealthChecker/2.0", true }) == nil {
		t.Errorf("the sidecar's parser: %v, or GET /healthz unmatched", err)
	}

	in[1].Response.Body = "a 204 with a body"
	if _, err := StaticRules(in); err == nil || !strings.Contains(err.Error(), `rule "any": body: a 204 answer has no body`) {
		t.Errorf("StaticRules of a 204 with a body = %v", err)
	}
}

// TestForgetDeletedConfigMapsPages: the pages read from a ConfigMap go with
// it, those of ConfigMaps still there stay.
func TestForgetDeletedConfigMapsPages(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	kept := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "kept"}}
	p := &policies{client: fake.NewClientBuilder().WithScheme(scheme).WithObjects(kept).Build()}
	for _, k := range []pageKey{{"shop", "gone", "a"}, {"shop", "gone", "b"}, {"shop", "kept", "a"}, {"other", "gone", "a"}} {
		p.pages.Store(k, page{body: "x"})
	}
	p.forget(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "gone"}})
	p.forget(context.Background(), kept)
	var left []pageKey
	p.pages.Range(func(k, _ any) bool { left = append(left, k.(pageKey)); return true })
	want := []pageKey{{"other", "gone", "a"}, {"shop", "kept", "a"}}
	if diff := cmp.Diff(want, left, cmp.AllowUnexported(pageKey{}), cmpopts.SortSlices(func(a, b pageKey) bool { return a.namespace+a.name+a.key < b.namespace+b.name+b.key })); diff != "" {
		t.Errorf("pages left (-want +got):\n%s", diff)
	}
}
