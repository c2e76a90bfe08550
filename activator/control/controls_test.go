package control

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/ebb-dev/ebb/activator/proxy"
	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/groupsuffix"
)

// An AppRoute's controls reach the activator's request path: its static
// responses answer at zero, its placeholder page answers a browser, and a
// held request goes at its cold-start timeout to the fallback Service's
// ClusterIP on the port the route names (here a Service whose ClusterIP
// is the loopback address, in front of a test server).
func TestRouteControlsReachTheRouter(t *testing.T) {
	names := groupsuffix.MustNew(groupsuffix.Default)
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := routingv1alpha1.AddToScheme(scheme, names.Group()); err != nil {
		t.Fatal(err)
	}
	fb := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "fallback") }))
	t.Cleanup(fb.Close)
	_, port, _ := net.SplitHostPort(fb.Listener.Addr().String())
	p, _ := strconv.Atoi(port)
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "sorry"},
		Spec: corev1.ServiceSpec{ClusterIP: "127.0.0.1", Ports: []corev1.ServicePort{
			{Name: "udp", Port: 53, Protocol: corev1.ProtocolUDP},
			{Name: "other", Port: 1, Protocol: corev1.ProtocolTCP},
			{Name: "http", Port: int32(p), Protocol: corev1.ProtocolTCP},
		}},
	}
	route := &routingv1alpha1.AppRoute{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "hello", Generation: 1},
		Spec: routingv1alpha1.AppRouteSpec{
			Hosts:            []string{"hello.example.com"},
			ScaleTargetRef:   routingv1alpha1.ScaleTargetReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "hello"},
			AppPort:          8080,
			ColdStartTimeout: &metav1.Duration{Duration: 50 * time.Millisecond},
			Fallback:         &routingv1alpha1.ServiceReference{Name: "sorry", Port: int32(p)},
			StaticResponses: []routingv1alpha1.StaticResponse{{
				Name: "health", When: routingv1alpha1.AnswerAtZero,
				Match:    routingv1alpha1.StaticMatch{Path: &routingv1alpha1.PathMatch{Type: routingv1alpha1.PathMatchExact, Value: "/healthz"}, Method: "GET"},
				Response: routingv1alpha1.StaticAnswer{Status: 200, Headers: []routingv1alpha1.HTTPHeader{{Name: "X-Static", Value: "yes"}}, Body: "fine"},
			}},
			Placeholder: &routingv1alpha1.Placeholder{Status: 503, Headers: []routingv1alpha1.HTTPHeader{{Name: "Refresh", Value: "2"}}, Body: "<p>waking</p>"},
		},
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(svc).Build()
	rt := proxy.NewRouter(proxy.RouterOptions{})
	t.Cleanup(rt.Close)
	s := &sources{cache: c, names: names, log: logr.Discard(), router: rt}
	s.rebuild(t.Context(), []*routingv1alpha1.AppRoute{route})

	for _, tc := range []struct {
		name, path, accept string
		code               int
		header, body       string
	}{
		{"static", "/healthz", "", 200, "X-Static", "fine"},
		{"placeholder", "/", "text/html", 503, "Refresh", "<p>waking</p>"},
		{"fallback", "/api", "application/json", 200, "", "fallback"},
	} {
		req := httptest.NewRequest(http.MethodGet, "http://hello.example.com"+tc.path, nil)
		req.Header.Set("Accept", tc.accept)
		w := httptest.NewRecorder()
		rt.ServeHTTP(w, req)
		if w.Code != tc.code || w.Body.String() != tc.body || (tc.header != "" && w.Header().Get(tc.header) == "") {
			t.Errorf("%s: got %d %v %q, want %d with %s, %q", tc.name, w.Code, w.Header(), w.Body.String(), tc.code, tc.header, tc.body)
		}
	}
}

// A fallback naming the app's own Service is not used: its ClusterIP
// leads back to the hand-off slice, where the request would be held again
// at each timeout. The request gets its 504.
func TestFallbackToOwnServiceIgnored(t *testing.T) {
	names := groupsuffix.MustNew(groupsuffix.Default)
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := routingv1alpha1.AddToScheme(scheme, names.Group()); err != nil {
		t.Fatal(err)
	}
	fb := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "fallback") }))
	t.Cleanup(fb.Close)
	_, port, _ := net.SplitHostPort(fb.Listener.Addr().String())
	p, _ := strconv.Atoi(port)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "hello"}, Spec: corev1.ServiceSpec{ClusterIP: "127.0.0.1", Ports: []corev1.ServicePort{{Name: "http", Port: int32(p)}}}}
	route := &routingv1alpha1.AppRoute{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "hello", Generation: 1},
		Spec: routingv1alpha1.AppRouteSpec{
			Hosts:            []string{"hello.example.com"},
			Service:          routingv1alpha1.ServiceReference{Name: "hello"},
			ScaleTargetRef:   routingv1alpha1.ScaleTargetReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "hello"},
			AppPort:          8080,
			ColdStartTimeout: &metav1.Duration{Duration: 50 * time.Millisecond},
			Fallback:         &routingv1alpha1.ServiceReference{Name: "hello"},
		},
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(svc).Build()
	rt := proxy.NewRouter(proxy.RouterOptions{})
	t.Cleanup(rt.Close)
	s := &sources{cache: c, names: names, log: logr.Discard(), router: rt}
	s.rebuild(t.Context(), []*routingv1alpha1.AppRoute{route})
	w := httptest.NewRecorder()
	rt.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "http://hello.example.com/", nil))
	if w.Code != http.StatusGatewayTimeout {
		t.Errorf("got %d %q, want the 504 of the cold-start timeout", w.Code, w.Body.String())
	}
}
