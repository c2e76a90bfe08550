package control

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ebb-dev/ebb/activator/proxy"
	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/routing"
)

// TestWakesOf: an AppRoute's wakes reach the Router with their namespace
// (the route's own when the wake names none) and their order; an app
// without wakes gets nil, so its request path pays nothing for them.
func TestWakesOf(t *testing.T) {
	r := &routingv1alpha1.AppRoute{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"}}
	if w := wakesOf(r); w != nil {
		t.Errorf("no wakes: %+v, want nil", w)
	}
	r.Spec.Wakes = []routingv1alpha1.Dependency{{App: "api"}, {App: "db", Namespace: "data"}}
	r.Spec.WakeOrder = routingv1alpha1.WakeOrdered
	want := &proxy.Wakes{Apps: []routing.Key{{Namespace: "shop", Name: "api"}, {Namespace: "data", Name: "db"}}, Ordered: true}
	if diff := cmp.Diff(want, wakesOf(r)); diff != "" {
		t.Errorf("wakes (-want +got):\n%s", diff)
	}
}
