package webhook

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	fakediscovery "k8s.io/client-go/discovery/fake"
	clienttesting "k8s.io/client-go/testing"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
)

// TestGatewayLook: the look for the Gateway API starts the HTTPRoute
// watch once when HTTPRoutes are served, changes nothing on a discovery
// error, and when they go stops the watch, lets no read through, and
// reconciles (in the leading replica) only the routes with a host from an
// HTTPRoute; when they come back the watch starts again.
func TestGatewayLook(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := routingv1alpha1.AddToScheme(scheme, "routing.ebb.dev"); err != nil {
		t.Fatal(err)
	}
	route := func(name string, from ...string) *routingv1alpha1.AppRoute {
		r := &routingv1alpha1.AppRoute{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name},
			Spec: routingv1alpha1.AppRouteSpec{ScaleTargetRef: routingv1alpha1.ScaleTargetReference{Name: name + "-deploy"}}}
		if len(from) > 0 {
			r.Status.HostSources = []routingv1alpha1.HostSource{{Host: name + ".example.com", From: from}}
		}
		return r
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		route("gw", "HTTPRoute/web", "Ingress/web"), route("ing", "Ingress/web"), route("plain")).Build()
	fd := &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{}}
	served := []*metav1.APIResourceList{{GroupVersion: "gateway.networking.k8s.io/v1", APIResources: []metav1.APIResource{{Name: "httproutes"}, {Name: "httproutes/status"}}}}
	elected := make(chan struct{})
	close(elected)
	resync := make(chan event.GenericEvent, 10)
	watches, unwatches := 0, 0
	g := &gatewayAPI{discovery: fd, elected: elected, resync: resync, routes: c, log: logr.Discard(),
		watch:   func() error { watches++; return nil },
		unwatch: func(context.Context) error { unwatches++; return nil }}
	reads := func() bool {
		read := false
		if err := g.read(func() error { read = true; return nil }); err != nil {
			t.Fatal(err)
		}
		return read
	}
	look := func() {
		t.Helper()
		if err := g.look(t.Context()); err != nil {
			t.Fatal(err)
		}
	}

	look()
	if watches != 0 || reads() {
		t.Fatalf("not served: %d watches, read %v; want none", watches, reads())
	}
	fd.Resources = served
	look()
	look()
	if watches != 1 || !reads() {
		t.Fatalf("served: %d watches, read %v; want 1, true", watches, reads())
	}
	// A discovery error changes nothing.
	fd.Resources = nil
	fd.PrependReactor("get", "resource", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection refused")
	})
	look()
	if unwatches != 0 || !reads() {
		t.Fatalf("after a discovery error: %d unwatches, read %v; want 0, true", unwatches, reads())
	}
	fd.ReactionChain = nil
	look()
	if unwatches != 1 || reads() {
		t.Fatalf("gone: %d unwatches, read %v; want 1, false", unwatches, reads())
	}
	var got []string
	for len(got) < 1 {
		select {
		case e := <-resync:
			got = append(got, e.Object.GetNamespace()+"/"+e.Object.GetName())
		case <-time.After(5 * time.Second):
			t.Fatal("no route reconciled when HTTPRoutes went")
		}
	}
	select {
	case e := <-resync:
		got = append(got, e.Object.GetNamespace()+"/"+e.Object.GetName())
	case <-time.After(100 * time.Millisecond):
	}
	if d := cmp.Diff([]string{"shop/gw-deploy"}, got); d != "" {
		t.Errorf("reconciled when HTTPRoutes went (-want +got):\n%s", d)
	}
	fd.Resources = served
	look()
	if watches != 2 || !reads() {
		t.Errorf("back: %d watches, read %v; want 2, true", watches, reads())
	}
}
