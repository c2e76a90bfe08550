package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// connApp is a test app that answers its name and counts the connections
// it accepted and saw close.
type connApp struct {
	srv            *httptest.Server
	mu             sync.Mutex
	opened, closed int
}

func newConnApp(t *testing.T, name string, h http.HandlerFunc) *connApp {
	t.Helper()
	a := &connApp{}
	if h == nil {
		h = func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, name) }
	}
	a.srv = httptest.NewUnstartedServer(h)
	a.srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		a.mu.Lock()
		defer a.mu.Unlock()
		switch s {
		case http.StateNew:
			a.opened++
		case http.StateClosed, http.StateHijacked:
			a.closed++
		}
	}
	a.srv.Start()
	t.Cleanup(a.srv.Close)
	return a
}

func (a *connApp) addr() string { return a.srv.Listener.Addr().String() }

func (a *connApp) conns() (opened, closed int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.opened, a.closed
}

// keepAlive sends n GETs for host over one client connection and returns
// the bodies.
func keepAlive(t *testing.T, url, host string, n int) []string {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	var bodies []string
	for range n {
		if _, err := io.WriteString(c, "GET /x?y=1 HTTP/1.1\r\nHost: "+host+"\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		bodies = append(bodies, fmt.Sprintf("%d %s", resp.StatusCode, b))
	}
	return bodies
}

func TestWarmSpreadsOverReadyEndpointsOnOneConnection(t *testing.T) {
	rt, url, rec := rig(t, RouterOptions{}, AppConfig{})
	a, b := newConnApp(t, "a", nil), newConnApp(t, "b", nil)
	rt.SetEndpoints(shopHello, []Endpoint{{Addr: a.addr(), Ready: true}, {Addr: b.addr(), Ready: true}, {Addr: "127.0.0.1:1"}})
	got := keepAlive(t, url, "hello.test", 6)
	// Round robin over the two ready ones, whichever comes first.
	want := []string{"200 a", "200 b", "200 a", "200 b", "200 a", "200 b"}
	if got[0] == "200 b" {
		want = []string{"200 b", "200 a", "200 b", "200 a", "200 b", "200 a"}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("answers (-want +got):\n%s", diff)
	}
	// Keep-alive to each endpoint: one pooled connection carried them all.
	for name, app := range map[string]*connApp{"a": a, "b": b} {
		if opened, _ := app.conns(); opened != 1 {
			t.Errorf("endpoint %s: %d connections opened, want 1 (reused)", name, opened)
		}
	}
	if len(rec.values()) != 0 || rt.Held() != 0 {
		t.Errorf("warm requests counted as held: pushed %v, held %d", rec.values(), rt.Held())
	}
}

func TestWarmEndpointRemovalDropsItsPool(t *testing.T) {
	rt, url, _ := rig(t, RouterOptions{}, AppConfig{})
	a, b := newConnApp(t, "a", nil), newConnApp(t, "b", nil)
	rt.SetEndpoints(shopHello, []Endpoint{{Addr: a.addr(), Ready: true}, {Addr: b.addr(), Ready: true}})
	keepAlive(t, url, "hello.test", 2)
	rt.SetEndpoints(shopHello, []Endpoint{{Addr: b.addr(), Ready: true}})
	if got, want := keepAlive(t, url, "hello.test", 3), []string{"200 b", "200 b", "200 b"}; !cmp.Equal(got, want) {
		t.Errorf("after removing a: %v, want %v", got, want)
	}
	if _, ok := rt.upstreams.m.Load(a.addr()); ok {
		t.Error("the upstream of the removed endpoint is still cached")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		opened, closed := a.conns()
		if opened == 1 && closed == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("removed endpoint: %d connections opened, %d closed; want its pooled one closed", opened, closed)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestWarmUpstreamDyingMidFlightIs502(t *testing.T) {
	rt, url, _ := rig(t, RouterOptions{}, AppConfig{})
	dying := newConnApp(t, "", func(w http.ResponseWriter, r *http.Request) {
		c, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			c.Close() // the pod dies after reading the request
		}
	})
	rt.SetEndpoints(shopHello, []Endpoint{{Addr: dying.addr(), Ready: true}})
	code, _, body := do(t, t.Context(), url+"/", "hello.test")
	if code != http.StatusBadGateway || !strings.HasPrefix(body, "ebb-activator: upstream "+dying.addr()+" failed: ") {
		t.Errorf("got %d %q, want 502 naming the upstream", code, body)
	}
	// The client connection survives a 502 of a body-less request.
	got := keepAlive(t, url, "hello.test", 2)
	for _, g := range got {
		if !strings.HasPrefix(g, "502 ebb-activator: upstream ") {
			t.Errorf("keep-alive after a 502: %q", g)
		}
	}
}

// TestWarmForwardsHeadersAsNetHTTPPathDoes: Host and target as received,
// hop-by-hop headers dropped, the client's X-Forwarded-Proto passed as sent
// and none added (TestForwardingHeadersPassThrough has the policy).
func TestWarmForwardsHeadersAsNetHTTPPathDoes(t *testing.T) {
	rt, url, _ := rig(t, RouterOptions{}, AppConfig{})
	app := newConnApp(t, "", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s|%s|%s|%s|%s|%s", r.Host, r.URL.RequestURI(), r.Header.Get("X-Forwarded-For"), r.Header.Get("X-Forwarded-Host"), r.Header.Get("X-Forwarded-Proto"), r.Header.Get("X-Hop"))
	})
	rt.SetEndpoints(shopHello, []Endpoint{{Addr: app.addr(), Ready: true}})
	code, _, body := do(t, t.Context(), url+"/p?q=1", "hello.test", "X-Forwarded-For", "10.1.1.1", "X-Forwarded-Proto", "https", "Connection", "X-Hop", "X-Hop", "dropped")
	if want := "hello.test|/p?q=1|10.1.1.1, 127.0.0.1||https|"; code != 200 || body != want {
		t.Errorf("got %d %q, want 200 %q", code, body, want)
	}
}

func TestColdThenWarmOnOneConnection(t *testing.T) {
	rt, url, _ := rig(t, RouterOptions{ColdStartTimeout: 10 * time.Second}, AppConfig{})
	app := newConnApp(t, "a", nil)
	held := make(chan bool, 1)
	go func() {
		deadline := time.Now().Add(5 * time.Second)
		for rt.Held() != 1 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		held <- rt.Held() == 1
		rt.SetEndpoints(shopHello, []Endpoint{{Addr: app.addr(), Ready: true}})
	}()
	// The first request is held (handed to net/http, parked, released), the
	// next ones go out warm on the same client connection.
	if got, want := keepAlive(t, url, "hello.test", 3), []string{"200 a", "200 a", "200 a"}; !cmp.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if !<-held {
		t.Error("the first request was not held")
	}
	if got := keepAlive(t, url, "nope.test", 1); len(got) != 1 || !strings.HasPrefix(got[0], `404 ebb-activator: no app is routed for host "nope.test"`) {
		t.Errorf("unknown host: %v", got)
	}
}

// TestWarmSmugglingThroughConnectionIsFramed: the warm path is the engine's
// (internal/http1); a Connection header that names Content-Length or
// Transfer-Encoding does not turn a body into a second request at the app.
func TestWarmSmugglingThroughConnectionIsFramed(t *testing.T) {
	smuggled := "GET /slow-evil HTTP/1.1\r\nHost: evil\r\n\r\n"
	for _, req := range []string{
		"POST /a HTTP/1.1\r\nHost: hello.test\r\nConnection: Content-Length\r\nContent-Length: 39\r\n\r\n" + smuggled,
		"POST /a HTTP/1.1\r\nHost: hello.test\r\nConnection: Transfer-Encoding\r\nTransfer-Encoding: chunked\r\n\r\n27\r\n" + smuggled + "\r\n0\r\n\r\n",
	} {
		rt, url, _ := rig(t, RouterOptions{}, AppConfig{})
		var mu sync.Mutex
		var seen []string
		app := newConnApp(t, "", func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			mu.Lock()
			seen = append(seen, fmt.Sprintf("%s %s %d", r.Method, r.URL.Path, len(b)))
			mu.Unlock()
			fmt.Fprint(w, r.URL.Path)
		})
		rt.SetEndpoints(shopHello, []Endpoint{{Addr: app.addr(), Ready: true}})
		c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c, req)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		c.Close()
		// A second client on a fresh connection, over the pooled upstream
		// connection the first one used.
		if got := keepAlive(t, url, "hello.test", 1); !cmp.Equal(got, []string{"200 /x"}) {
			t.Errorf("second client got %v", got)
		}
		mu.Lock()
		if diff := cmp.Diff([]string{"POST /a 39", "GET /x 0"}, seen); diff != "" {
			t.Errorf("requests the app saw (-want +got):\n%s", diff)
		}
		mu.Unlock()
	}
}
