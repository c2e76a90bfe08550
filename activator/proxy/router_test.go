package proxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ebb-dev/ebb/internal/holdpush"
	"github.com/ebb-dev/ebb/internal/routing"
)

// recorder is a Pusher that keeps every value pushed.
type recorder struct {
	mu   sync.Mutex
	seen []int64
}

func (r *recorder) Set(_ holdpush.App, n int64) {
	r.mu.Lock()
	r.seen = append(r.seen, n)
	r.mu.Unlock()
}

func (r *recorder) values() []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int64(nil), r.seen...)
}

var shopHello = routing.Key{Namespace: "shop", Name: "hello"}

// rig is a Router behind a real HTTP server, routing hello.test to shop/hello.
func rig(t *testing.T, opts RouterOptions, cfg AppConfig) (*Router, string, *recorder) {
	t.Helper()
	return rigProtocols(t, opts, cfg, false)
}

// rigProtocols is rig, serving h2c as well when h2c is set (as Run does).
func rigProtocols(t *testing.T, opts RouterOptions, cfg AppConfig, h2c bool) (*Router, string, *recorder) {
	t.Helper()
	rec := &recorder{}
	opts.Pusher = rec
	rt := NewRouter(opts)
	rt.SetRoutes([]routing.Route[AppConfig]{{Key: shopHello, Hosts: []string{"hello.test"}, Value: cfg}}, nil)
	srv := &http.Server{Handler: rt, ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 64 << 10}
	if h2c {
		srv.Protocols = new(http.Protocols)
		srv.Protocols.SetHTTP1(true)
		srv.Protocols.SetUnencryptedHTTP2(true)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ds := NewServer(rt, srv)
	go ds.Serve(ln)
	t.Cleanup(func() { ds.Close() })
	t.Cleanup(rt.Close)
	return rt, "http://" + ln.Addr().String(), rec
}

func testApp(t *testing.T, name string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s", name, r.Host)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func do(t *testing.T, ctx context.Context, url, host string, hdr ...string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err.Error() // callers compare the answer; no Fatal off the test goroutine
	}
	req.Host = host
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

func waitHeld(t *testing.T, rt *Router, n int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for rt.Held() != n {
		if time.Now().After(deadline) {
			t.Fatalf("held = %d, want %d", rt.Held(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestUnknownHostIs404NamingIt(t *testing.T) {
	_, url, _ := rig(t, RouterOptions{}, AppConfig{})
	code, _, body := do(t, t.Context(), url+"/x", "nobody.test")
	if code != http.StatusNotFound || !strings.Contains(body, `"nobody.test"`) {
		t.Errorf("got %d %q, want 404 naming the host", code, body)
	}
}

func TestWarmIsProxiedKeepingHost(t *testing.T) {
	rt, url, rec := rig(t, RouterOptions{}, AppConfig{})
	rt.SetEndpoints(shopHello, []Endpoint{{Addr: testApp(t, "a"), Ready: true}})
	code, _, body := do(t, t.Context(), url, "hello.test:80")
	if code != 200 || body != "a hello.test:80" {
		t.Errorf("got %d %q", code, body)
	}
	if v := rec.values(); len(v) != 0 {
		t.Errorf("a warm request was counted as held: %v", v)
	}
}

func TestHeldUntilReadyThenSpread(t *testing.T) {
	rt, url, rec := rig(t, RouterOptions{}, AppConfig{})
	const n = 10
	bodies := make(chan string, n)
	for range n {
		go func() { _, _, b := do(t, t.Context(), url, "hello.test"); bodies <- b }()
	}
	waitHeld(t, rt, n)
	rt.SetEndpoints(shopHello, []Endpoint{{Addr: testApp(t, "a"), Ready: true}, {Addr: testApp(t, "b"), Ready: true}})
	got := map[string]int{}
	for range n {
		got[<-bodies]++
	}
	if d := cmp.Diff(map[string]int{"a hello.test": n / 2, "b hello.test": n / 2}, got); d != "" {
		t.Errorf("released requests not spread over both pods (-want +got):\n%s", d)
	}
	v := rec.values()
	if v[0] != 1 || v[len(v)-1] != 0 || len(v) != 2*n {
		t.Errorf("pushed held counts %v: want 1 first, 0 last, one push per change", v)
	}
}

func TestQueueLimits(t *testing.T) {
	for name, c := range map[string]struct {
		opts RouterOptions
		cfg  AppConfig
		want string
	}{
		"app queue from the AppRoute": {RouterOptions{QueueSize: 100}, AppConfig{QueueSize: 3}, "hold queue of app shop/hello is full (3 requests)"},
		"default app queue":           {RouterOptions{QueueSize: 3}, AppConfig{}, "hold queue of app shop/hello is full (3 requests)"},
		"an app alone gets half":      {RouterOptions{QueueSize: 100, MaxHeld: 6}, AppConfig{}, "app shop/hello holds its fair share of this activator's 6 request slots"},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			rt, url, _ := rig(t, c.opts, c.cfg)
			for range 3 {
				go do(t, ctx, url, "hello.test")
			}
			waitHeld(t, rt, 3)
			code, hdr, body := do(t, t.Context(), url, "hello.test")
			if code != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "" || !strings.Contains(body, c.want) {
				t.Errorf("got %d Retry-After=%q %q, want 503 with Retry-After and %q", code, hdr.Get("Retry-After"), body, c.want)
			}
			cancel()
			waitHeld(t, rt, 0)
		})
	}
}

// TestFairShare: an app flooding the activator holds at most its fair
// share, MaxHeld ÷ (apps holding + 1), and gets 503 with Retry-After
// beyond it; another app arriving later still has its requests held.
func TestFairShare(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	rt, url, _ := rig(t, RouterOptions{QueueSize: 100, MaxHeld: 12}, AppConfig{})
	other := routing.Key{Namespace: "shop", Name: "other"}
	rt.SetRoutes([]routing.Route[AppConfig]{
		{Key: shopHello, Hosts: []string{"hello.test"}},
		{Key: other, Hosts: []string{"other.test"}},
	}, nil)
	type answer struct {
		code       int
		retryAfter string
		body       string
	}
	flood := make(chan answer, 12)
	for range 12 {
		go func() {
			code, hdr, body := do(t, ctx, url, "hello.test")
			flood <- answer{code, hdr.Get("Retry-After"), body}
		}()
	}
	// Alone, the flooding app gets half of the 12 slots; the other 6 of
	// its requests are refused at once.
	for range 6 {
		a := <-flood
		if a.code != http.StatusServiceUnavailable || a.retryAfter == "" || !strings.Contains(a.body, "fair share") {
			t.Errorf("flooding request beyond its share: %d Retry-After=%q %q, want 503 naming the fair share", a.code, a.retryAfter, a.body)
		}
	}
	waitHeld(t, rt, 6)
	for range 3 {
		go do(t, ctx, url, "other.test")
	}
	waitHeld(t, rt, 9) // 12 ÷ (2 + 1) = 4 for the newcomer: its 3 are held
	if code, _, body := do(t, t.Context(), url, "hello.test"); code != http.StatusServiceUnavailable || !strings.Contains(body, "(4 with 2 app(s) holding)") {
		t.Errorf("the flooding app, over its share of 4 with two apps holding: %d %q", code, body)
	}
	cancel()
	waitHeld(t, rt, 0)
}

func TestColdStartTimeoutIs504NamingAppAndWait(t *testing.T) {
	rt, url, rec := rig(t, RouterOptions{ColdStartTimeout: time.Hour}, AppConfig{ColdStartTimeout: 150 * time.Millisecond})
	start := time.Now()
	code, _, body := do(t, t.Context(), url, "hello.test")
	if took := time.Since(start); took < 150*time.Millisecond || took > 2*time.Second {
		t.Errorf("answered after %s, want the app's 150ms timeout", took)
	}
	if code != http.StatusGatewayTimeout || !strings.Contains(body, "shop/hello") || !strings.Contains(body, "had no ready pod after 1") || !strings.Contains(body, "(cold-start timeout 150ms)") {
		t.Errorf("got %d %q, want 504 naming shop/hello and the wait", code, body)
	}
	if rt.Held() != 0 || cmp.Diff([]int64{1, 0}, rec.values()) != "" {
		t.Errorf("after the timeout: held %d, pushes %v", rt.Held(), rec.values())
	}
}

func TestClientDisconnectFreesSlotAtOnce(t *testing.T) {
	rt, url, rec := rig(t, RouterOptions{QueueSize: 1}, AppConfig{})
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: hello.test\r\n\r\n")
	waitHeld(t, rt, 1)
	start := time.Now()
	c.Close()
	waitHeld(t, rt, 0)
	if took := time.Since(start); took > time.Second {
		t.Errorf("slot freed %s after the client left", took)
	}
	waitFor(t, "a second push", func() bool { return len(rec.values()) >= 2 }) // leave pushes just after freeing the slot
	if d := cmp.Diff([]int64{1, 0}, rec.values()); d != "" {
		t.Errorf("pushes (-want +got):\n%s", d)
	}
	// The slot is free: another request can be held.
	ctx, cancel := context.WithCancel(t.Context())
	go do(t, ctx, url, "hello.test")
	waitHeld(t, rt, 1)
	cancel()
	waitHeld(t, rt, 0)
}

func TestReleasedByProbingNotReadySidecar(t *testing.T) {
	rt, url, _ := rig(t, RouterOptions{ProbeInterval: 5 * time.Millisecond}, AppConfig{})
	var ready atomic.Bool
	admin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ready" && ready.Load() {
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer admin.Close()
	rt.SetEndpoints(shopHello, []Endpoint{{Addr: testApp(t, "a"), AdminAddr: strings.TrimPrefix(admin.URL, "http://"), Ready: false}})
	done := make(chan string, 1)
	go func() { _, _, b := do(t, t.Context(), url, "hello.test"); done <- b }()
	waitHeld(t, rt, 1)
	select {
	case b := <-done:
		t.Fatalf("answered %q before the sidecar was ready", b)
	case <-time.After(50 * time.Millisecond):
	}
	readyAt := time.Now()
	ready.Store(true)
	select {
	case b := <-done:
		if b != "a hello.test" {
			t.Errorf("got %q", b)
		}
		if took := time.Since(readyAt); took > 200*time.Millisecond {
			t.Errorf("released %s after the sidecar turned ready", took)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("not released after the sidecar turned ready")
	}
}

func TestRouteDeletedWhileHeldIs503(t *testing.T) {
	rt, url, _ := rig(t, RouterOptions{}, AppConfig{})
	done := make(chan int, 1)
	go func() { code, _, _ := do(t, t.Context(), url, "hello.test"); done <- code }()
	waitHeld(t, rt, 1)
	rt.SetRoutes(nil, nil)
	if code := <-done; code != http.StatusServiceUnavailable {
		t.Errorf("got %d, want 503", code)
	}
}

func TestPlaceholderForBrowsersOnly(t *testing.T) {
	rt, url, rec := rig(t, RouterOptions{ColdStartTimeout: 100 * time.Millisecond}, AppConfig{Placeholder: true})
	code, hdr, body := do(t, t.Context(), url, "hello.test", "Accept", "text/html,application/xhtml+xml")
	if code != http.StatusServiceUnavailable || !strings.Contains(hdr.Get("Content-Type"), "text/html") || !strings.Contains(body, `http-equiv="refresh"`) {
		t.Errorf("browser got %d %q %q", code, hdr.Get("Content-Type"), body)
	}
	if v := rec.values(); len(v) == 0 || v[0] != 1 {
		t.Errorf("the placeholder did not wake the app: pushes %v", v)
	}
	if code, _, _ := do(t, t.Context(), url, "hello.test", "Accept", "application/json"); code != http.StatusGatewayTimeout {
		t.Errorf("API client got %d, want to be held (then 504)", code)
	}
	_ = rt
}

func TestBadRequestHeadsAnswered(t *testing.T) {
	_, url, _ := rig(t, RouterOptions{}, AppConfig{})
	srvAddr := strings.TrimPrefix(url, "http://")
	for name, raw := range map[string]string{
		"garbage":         "HELLO\r\n\r\n",
		"no host":         "GET / HTTP/1.1\r\n\r\n",
		"oversized head":  "GET / HTTP/1.1\r\nHost: hello.test\r\nX: " + strings.Repeat("a", 2<<20) + "\r\n\r\n",
		"bad host header": "GET / HTTP/1.1\r\nHost: a b\r\n\r\n",
	} {
		c, err := net.Dial("tcp", srvAddr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		go io.WriteString(c, raw)
		b := make([]byte, 64)
		n, _ := io.ReadAtLeast(c, b, 12)
		c.Close()
		if !strings.HasPrefix(string(b[:n]), "HTTP/1.1 4") {
			t.Errorf("%s: got %q, want a 4xx", name, b[:n])
		}
	}
}

// TestColdStartObservedPerApp: the cold-start histogram carries the app, so
// dashboards show each app's cold starts and their duration.
func TestColdStartObservedPerApp(t *testing.T) {
	reg := prometheus.NewRegistry()
	rt, url, _ := rig(t, RouterOptions{Metrics: NewMetrics(reg)}, AppConfig{})
	done := make(chan struct{})
	go func() { do(t, t.Context(), url, "hello.test"); close(done) }()
	waitHeld(t, rt, 1)
	rt.SetEndpoints(shopHello, []Endpoint{{Addr: testApp(t, "a"), Ready: true}})
	<-done
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range families {
		if f.GetName() != metricColdStart {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			got = append(got, fmt.Sprintf("%s/%s count=%d", labels["namespace"], labels["app"], m.GetHistogram().GetSampleCount()))
		}
	}
	if d := cmp.Diff([]string{"shop/hello count=1"}, got); d != "" {
		t.Errorf("%s (-want +got):\n%s", metricColdStart, d)
	}
}
