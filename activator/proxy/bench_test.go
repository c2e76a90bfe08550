package proxy

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ebb-dev/ebb/internal/routing"
)

// discard is a ResponseWriter that keeps nothing, so that the benchmark
// measures the activator's handler chain and its upstream round trip.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}

// BenchmarkWarmHandlerChain is one warm request through Router.ServeHTTP
// to an app on loopback (keep-alive), per iteration.
func BenchmarkWarmHandlerChain(b *testing.B) {
	hello := []byte("hello from bench\n")
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Content-Type"] = []string{"text/plain; charset=utf-8"}
		w.Write(hello)
	}))
	defer app.Close()
	rt := NewRouter(RouterOptions{})
	defer rt.Close()
	rt.SetRoutes([]routing.Route[AppConfig]{{Key: shopHello, Hosts: []string{"hello.test"}}}, nil)
	rt.SetEndpoints(shopHello, []Endpoint{{Addr: strings.TrimPrefix(app.URL, "http://"), Ready: true}})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		w := &discard{h: http.Header{}}
		r := httptest.NewRequest(http.MethodGet, "http://hello.test/", nil) // the proxy does not modify it
		r.RemoteAddr = "10.0.0.1:1234"
		for pb.Next() {
			clear(w.h)
			rt.ServeHTTP(w, r)
		}
	})
}
