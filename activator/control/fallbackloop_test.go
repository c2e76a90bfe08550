package control

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/ebb-dev/ebb/activator/proxy"
	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/groupsuffix"
)

func controlScheme(t *testing.T, names groupsuffix.Names) *runtime.Scheme {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := routingv1alpha1.AddToScheme(scheme, names.Group()); err != nil {
		t.Fatal(err)
	}
	return scheme
}

func testRoute(name, service, fallback string) *routingv1alpha1.AppRoute {
	r := &routingv1alpha1.AppRoute{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, Generation: 1, UID: types.UID(name + "-1")},
		Spec: routingv1alpha1.AppRouteSpec{
			Hosts:            []string{name + ".example.com"},
			Service:          routingv1alpha1.ServiceReference{Name: service},
			ScaleTargetRef:   routingv1alpha1.ScaleTargetReference{APIVersion: "apps/v1", Kind: "Deployment", Name: name},
			AppPort:          8080,
			ColdStartTimeout: &metav1.Duration{Duration: 50 * time.Millisecond},
		},
	}
	if fallback != "" {
		r.Spec.Fallback = &routingv1alpha1.ServiceReference{Name: fallback}
	}
	return r
}

// A fallback that is itself an app ebb routes is not used: its Service's
// traffic goes to an activator while that app is at zero (its hand-off
// slice), which would route the request back. So is one whose Service has
// a hand-off slice of any instance. The request gets its 504; a plain
// Service is used.
func TestFallbackToAnotherEbbAppIgnored(t *testing.T) {
	names := groupsuffix.MustNew(groupsuffix.Default)
	fb := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "fallback") }))
	t.Cleanup(fb.Close)
	port := int32(fb.Listener.Addr().(*net.TCPAddr).Port)
	svc := func(name string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name}, Spec: corev1.ServiceSpec{ClusterIP: "127.0.0.1", Ports: []corev1.ServicePort{{Name: "http", Port: port}}}}
	}
	handoff := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "elsewhere-activator", Labels: map[string]string{
		discoveryv1.LabelServiceName: "elsewhere", discoveryv1.LabelManagedBy: "activator.team1.example.com",
	}}, AddressType: discoveryv1.AddressTypeIPv4}
	c := fake.NewClientBuilder().WithScheme(controlScheme(t, names)).
		WithObjects(svc("hello"), svc("other"), svc("elsewhere"), svc("sorry"), handoff).
		WithIndex(&discoveryv1.EndpointSlice{}, byService, func(o client.Object) []string {
			return []string{o.GetNamespace() + "/" + o.GetLabels()[discoveryv1.LabelServiceName]}
		}).Build()
	rt := proxy.NewRouter(proxy.RouterOptions{})
	t.Cleanup(rt.Close)
	s := &sources{cache: c, names: names, log: logr.Discard(), router: rt}
	s.rebuild(t.Context(), []*routingv1alpha1.AppRoute{
		testRoute("hello", "hello", "other"),
		testRoute("other", "other", ""),
		testRoute("third", "third", "elsewhere"),
		testRoute("fourth", "fourth", "sorry"),
	})
	for host, want := range map[string]int{"hello": http.StatusGatewayTimeout, "third": http.StatusGatewayTimeout, "fourth": http.StatusOK} {
		w := httptest.NewRecorder()
		rt.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "http://"+host+".example.com/", nil))
		if w.Code != want {
			t.Errorf("%s: got %d %q, want %d", host, w.Code, w.Body.String(), want)
		}
	}
}

// The compiled controls of a route are kept per object, not per name: an
// AppRoute deleted and made again under its name starts again at
// generation 1, and must not be served the old object's page.
func TestCompiledControlsFollowTheObject(t *testing.T) {
	names := groupsuffix.MustNew(groupsuffix.Default)
	c := fake.NewClientBuilder().WithScheme(controlScheme(t, names)).Build()
	rt := proxy.NewRouter(proxy.RouterOptions{})
	t.Cleanup(rt.Close)
	s := &sources{cache: c, names: names, log: logr.Discard(), router: rt}
	r := testRoute("hello", "", "")
	r.Spec.Placeholder = &routingv1alpha1.Placeholder{Status: 503, Body: "<p>old</p>"}
	if _, p := s.compiled(r); p == nil || p.Body != "<p>old</p>" {
		t.Fatalf("page %+v", p)
	}
	again := r.DeepCopy()
	again.UID = "hello-2"
	again.Spec.Placeholder.Body = "<p>new</p>"
	if _, p := s.compiled(again); p == nil || p.Body != "<p>new</p>" {
		t.Errorf("the AppRoute made again under its name got page %+v, want <p>new</p>", p)
	}
}
