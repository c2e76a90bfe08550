package control

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/ebb-dev/ebb/activator/proxy"
	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/internal/routing"
)

// An AppRoute's spec.hostPaths (the hosts the webhook takes from Ingresses
// and HTTPRoutes) reach the activator's request path, each host with its
// own prefixes: a request for one is served by the app, a path outside its
// prefixes and a host the route does not name are 404.
func TestHostPathsReachTheRouter(t *testing.T) {
	names := groupsuffix.MustNew(groupsuffix.Default)
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := routingv1alpha1.AddToScheme(scheme, names.Group()); err != nil {
		t.Fatal(err)
	}
	route := &routingv1alpha1.AppRoute{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "hello", Generation: 2},
		Spec: routingv1alpha1.AppRouteSpec{
			HostPaths: []routingv1alpha1.HostPaths{
				{Host: "api.example.com", PathPrefixes: []string{"/api"}},
				{Host: "www.example.com"},
			},
			ScaleTargetRef: routingv1alpha1.ScaleTargetReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "hello"},
			AppPort:        8080,
		},
	}
	c := fake.NewClientBuilder().WithScheme(scheme).Build()
	rt := proxy.NewRouter(proxy.RouterOptions{})
	t.Cleanup(rt.Close)
	s := &sources{cache: c, names: names, log: logr.Discard(), router: rt}
	s.rebuild(t.Context(), []*routingv1alpha1.AppRoute{route})
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello") }))
	t.Cleanup(app.Close)
	rt.SetEndpoints(routing.Key{Namespace: "shop", Name: "hello"}, []proxy.Endpoint{{Addr: strings.TrimPrefix(app.URL, "http://"), Ready: true}})

	for _, tc := range []struct {
		host, path string
		want       int
	}{
		{"api.example.com", "/api/users", http.StatusOK},
		{"api.example.com", "/other", http.StatusNotFound},
		{"www.example.com", "/anything", http.StatusOK},
		{"other.example.com", "/api", http.StatusNotFound},
	} {
		req := httptest.NewRequest(http.MethodGet, "http://"+tc.host+tc.path, nil)
		w := httptest.NewRecorder()
		rt.ServeHTTP(w, req)
		if w.Code != tc.want {
			t.Errorf("%s%s: %d %q, want %d", tc.host, tc.path, w.Code, w.Body.String(), tc.want)
		}
	}
}
