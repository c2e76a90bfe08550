package webhook

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	fakediscovery "k8s.io/client-go/discovery/fake"
	clienttesting "k8s.io/client-go/testing"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/testwait"
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
	g := newGatewayAPI()
	g.discovery, g.elected, g.resync, g.routes, g.log = fd, elected, resync, c, logr.Discard()
	g.watch = func() error { watches++; return nil }
	g.unwatch = func(context.Context) error { unwatches++; return nil }
	g.synced = func(context.Context) bool { return true }
	reads := func() bool {
		read := false
		if err := g.read(t.Context(), func() error { read = true; return nil }); err != nil {
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

// servedDiscovery serves HTTPRoutes while served is set, and counts looks.
type servedDiscovery struct {
	*fakediscovery.FakeDiscovery
	served atomic.Bool
	looks  atomic.Int32
}

func (d *servedDiscovery) ServerResourcesForGroupVersion(gv string) (*metav1.APIResourceList, error) {
	d.looks.Add(1)
	if d.served.Load() {
		return &metav1.APIResourceList{GroupVersion: gv, APIResources: []metav1.APIResource{{Name: "httproutes"}}}, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{}, gv)
}

// TestGatewayPolls: while HTTPRoutes are not served the look runs every
// interval; while they are, nothing polls, and only the HTTPRoute
// informer's "not found" (its API gone) brings a look.
func TestGatewayPolls(t *testing.T) {
	defer func(d time.Duration) { gatewayCheckInterval = d }(gatewayCheckInterval)
	gatewayCheckInterval = 10 * time.Millisecond
	fd := &servedDiscovery{FakeDiscovery: &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{}}}
	g := newGatewayAPI()
	g.discovery, g.log = fd, logr.Discard()
	g.watch = func() error { return nil }
	g.unwatch = func(context.Context) error { return nil }
	g.synced = func(context.Context) bool { return true }
	g.elected = make(chan struct{}) // never: no resync
	served := func() bool {
		ran := false
		_ = g.read(t.Context(), func() error { ran = true; return nil })
		return ran
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- g.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	testwait.Check(t, 5*time.Second, func() error {
		if n := fd.looks.Load(); n < 3 {
			return fmt.Errorf("%d looks while not served; want one every interval", n)
		}
		return nil
	})
	fd.served.Store(true)
	testwait.Check(t, 5*time.Second, func() error {
		if !served() {
			return errors.New("not installed yet")
		}
		return nil
	})
	time.Sleep(50 * time.Millisecond) // a look under way ends
	before := fd.looks.Load()
	time.Sleep(100 * time.Millisecond)
	if n := fd.looks.Load() - before; n != 0 {
		t.Errorf("%d looks in 100 ms while served; want none", n)
	}
	// Another informer's errors bring no look; the HTTPRoute informer's
	// "not found" does.
	notFound := apierrors.NewNotFound(schema.GroupResource{Group: "gateway.networking.k8s.io", Resource: "httproutes"}, "")
	pods := toolscache.NewReflector(&toolscache.ListWatch{}, &corev1.Pod{}, toolscache.NewStore(toolscache.MetaNamespaceKeyFunc), 0)
	optionalAPIs{g}.watchError(t.Context(), pods, notFound)
	time.Sleep(50 * time.Millisecond)
	if n := fd.looks.Load() - before; n != 0 {
		t.Errorf("a Pod informer's error brought %d looks", n)
	}
	fd.served.Store(false)
	routes := toolscache.NewReflector(&toolscache.ListWatch{}, &gatewayv1.HTTPRoute{}, toolscache.NewStore(toolscache.MetaNamespaceKeyFunc), 0)
	optionalAPIs{g}.watchError(t.Context(), routes, notFound)
	testwait.Check(t, 5*time.Second, func() error {
		if served() {
			return errors.New("still installed")
		}
		return nil
	})
}

// TestGatewayGoneBeforeSyncDoesNotStall: the HTTPRoute watch starts (they
// are served) and before its informer's first list succeeds their CRD
// goes, or the list keeps failing. A reconcile's read must not sit in the
// cache's List, which waits for the sync with no end, holding the read
// lock: the informer's "not found" brings a look, whose removal of the
// informer would wait behind it, and every later reconcile behind the
// look (all workers hung, readiness lost). The read says "not synced" at
// once, the look removes the informer, and later reads pass.
func TestGatewayGoneBeforeSyncDoesNotStall(t *testing.T) {
	fd := &servedDiscovery{FakeDiscovery: &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{}}}
	g := newGatewayAPI()
	elected := make(chan struct{})
	close(elected)
	scheme := runtime.NewScheme()
	if err := routingv1alpha1.AddToScheme(scheme, "routing.ebb.dev"); err != nil {
		t.Fatal(err)
	}
	g.discovery, g.elected, g.resync, g.log = fd, elected, make(chan event.GenericEvent, 10), logr.Discard()
	g.routes = fake.NewClientBuilder().WithScheme(scheme).Build()
	g.watch = func() error { return nil }
	unwatched := make(chan struct{})
	g.unwatch = func(context.Context) error { close(unwatched); return nil }
	g.synced = func(context.Context) bool { return false } // never syncs
	fd.served.Store(true)
	if err := g.look(t.Context()); err != nil || !g.installed {
		t.Fatalf("look = %v, installed %v", err, g.installed)
	}

	// A reconcile's read: its List would wait for the sync until its
	// context ends (never, in a reconcile).
	listCtx, cancelList := context.WithCancel(t.Context())
	defer cancelList()
	read := make(chan error, 1)
	go func() {
		read <- g.read(t.Context(), func() error { <-listCtx.Done(); return listCtx.Err() })
	}()
	select {
	case err := <-read:
		if !errors.Is(err, errNotSynced) {
			t.Errorf("read before the sync = %v, want %v", err, errNotSynced)
		}
	case <-time.After(3 * time.Second):
		t.Error("a read waited 3 s in the List of an informer that never syncs, holding the read lock")
	}

	// The informer's "not found": the look finds HTTPRoutes gone.
	fd.served.Store(false)
	looked := make(chan error, 1)
	go func() { looked <- g.look(t.Context()) }()
	select {
	case err := <-looked:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(3 * time.Second):
		cancelList() // let the stuck reader go, so that the test ends
		t.Fatal("the look that removes the HTTPRoute informer waited 3 s behind a read stuck in its List: every later reconcile waits behind the look")
	}
	<-unwatched
	if err := g.read(t.Context(), func() error { t.Error("read HTTPRoutes after they went"); return nil }); err != nil {
		t.Errorf("read after HTTPRoutes went = %v, want nil (none served)", err)
	}
}

// TestNotSyncedNamesTheAPI: a read before an optional API's informer has
// synced fails (the reconcile is retried) with an error that names that
// API, the Gateway API's HTTPRoutes or a --scale-targets kind, not always
// HTTPRoutes.
func TestNotSyncedNamesTheAPI(t *testing.T) {
	for _, tc := range []struct {
		api  *optionalAPI
		want string
	}{
		{newGatewayAPI(), "the Gateway API's HTTPRoutes: served, but its informer has not synced yet"},
		{newScaleTargetAPIs([]schema.GroupResource{{Group: "example.com", Resource: "workers"}})[0].api, "workers.example.com: served, but its informer has not synced yet"},
	} {
		tc.api.installed = true
		tc.api.synced = func(context.Context) bool { return false }
		err := tc.api.read(t.Context(), func() error { t.Errorf("%s read before its informer synced", tc.api.what); return nil })
		if !errors.Is(err, errNotSynced) || err.Error() != tc.want {
			t.Errorf("read of %s before the sync = %v, want %q", tc.api.what, err, tc.want)
		}
	}
}

// TestReadyOnceSynced: the webhook is ready once its cache has synced, and
// stays so when an informer added later (the HTTPRoute watch, when the
// Gateway API appears) cannot sync, its API gone or its list refused:
// admission reads no HTTPRoute.
func TestReadyOnceSynced(t *testing.T) {
	var synced atomic.Bool
	check := cacheSynced(func(context.Context) bool { return synced.Load() })
	req := httptest.NewRequest("GET", "/readyz", nil)
	if err := check(req); err == nil {
		t.Error("ready before the cache has synced")
	}
	synced.Store(true)
	if err := check(req); err != nil {
		t.Errorf("not ready once the cache has synced: %v", err)
	}
	synced.Store(false) // the HTTPRoute informer, added now, never syncs
	if err := check(req); err != nil {
		t.Errorf("not ready because an informer added later has not synced: %v", err)
	}
}
