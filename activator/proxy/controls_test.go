package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	h1 "github.com/ebb-dev/ebb/internal/http1"
	"github.com/ebb-dev/ebb/internal/routing"
	"github.com/ebb-dev/ebb/internal/staticanswer"
	"github.com/ebb-dev/ebb/internal/tcptest"
	"github.com/ebb-dev/ebb/internal/testwait"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
)

// Raw-TCP tests of a route's controls in the activator: static
// responses, its own placeholder page, its fallback, its timeouts.

func staticSet(t *testing.T, rules ...staticanswer.Rule) *staticanswer.Set {
	t.Helper()
	set, err := staticanswer.Compile(rules)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// rawAnswer is one response as read off the wire.
type rawAnswer struct {
	Code   int
	Header http.Header
	Body   string
}

func readRaw(t *testing.T, br *bufio.Reader, head bool) rawAnswer {
	t.Helper()
	req := &http.Request{Method: http.MethodGet}
	if head {
		req.Method = http.MethodHead
	}
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return rawAnswer{resp.StatusCode, resp.Header, string(b)}
}

// TestStaticAnswerAtZeroNeverHolds: at zero, a request an AtZero rule
// matches is answered from the rule at once (status, headers, body), on a
// connection that stays open for the next one, a HEAD without the body;
// none is held nor told to the scaler, so the app is not woken. A
// request the rules do not match, or whose path is not canonical
// (/%68ealthz), is held and wakes the app.
func TestStaticAnswerAtZeroNeverHolds(t *testing.T) {
	set := staticSet(t, staticanswer.Rule{Name: "health", When: staticanswer.AtZero, PathType: staticanswer.Exact, Path: "/healthz", Status: 200, ResponseHeaders: []staticanswer.Header{{Name: "X-Probe", Value: "static"}}, Body: "fine"})
	rt, url, rec := rig(t, RouterOptions{ColdStartTimeout: 300 * time.Millisecond}, AppConfig{Static: set})
	c := dialRaw(t, url)
	br := bufio.NewReader(c)
	for i, req := range []string{"GET /healthz HTTP/1.1\r\nHost: hello.test\r\n\r\n", "GET /healthz?x=1 HTTP/1.1\r\nHost: hello.test\r\n\r\n", "HEAD /healthz HTTP/1.1\r\nHost: hello.test\r\n\r\n"} {
		io.WriteString(c, req)
		got := readRaw(t, br, strings.HasPrefix(req, "HEAD"))
		want := "fine"
		if strings.HasPrefix(req, "HEAD") {
			want = ""
		}
		if got.Code != 200 || got.Header.Get("X-Probe") != "static" || got.Body != want || got.Header.Get("Connection") == "close" {
			t.Errorf("request %d: got %d %v %q, want 200 X-Probe: static %q kept alive", i, got.Code, got.Header, got.Body, want)
		}
	}
	if v := rec.values(); len(v) != 0 || rt.Held() != 0 {
		t.Fatalf("static answers were held or told to the scaler: held %d, pushes %v", rt.Held(), v)
	}
	for _, target := range []string{"/%68ealthz", "/other", "/healthz/x"} {
		c := dialRaw(t, url)
		io.WriteString(c, "GET "+target+" HTTP/1.1\r\nHost: hello.test\r\n\r\n")
		waitHeld(t, rt, 1)
		if got := readAnswers(t, c, 1); got[0].Code != http.StatusGatewayTimeout {
			t.Errorf("%s: got %d, want held (then 504)", target, got[0].Code)
		}
		waitHeld(t, rt, 0)
	}
	if v := rec.values(); len(v) == 0 {
		t.Error("the requests no rule answers did not wake the app")
	}
}

// TestStaticAnswerWarm: while the activator forwards for a warm app, an
// Always rule answers; an AtZero one lets the request through to the app.
func TestStaticAnswerWarm(t *testing.T) {
	set := staticSet(t,
		staticanswer.Rule{Name: "always", When: staticanswer.Always, PathType: staticanswer.Exact, Path: "/always", Status: 204},
		staticanswer.Rule{Name: "zero", When: staticanswer.AtZero, PathType: staticanswer.Exact, Path: "/zero", Status: 200, Body: "static"})
	rt, url, _ := rig(t, RouterOptions{}, AppConfig{Static: set})
	rt.SetEndpoints(shopHello, []Endpoint{{Addr: echoApp(t), Ready: true}})
	c := dialRaw(t, url)
	br := bufio.NewReader(c)
	io.WriteString(c, "GET /always HTTP/1.1\r\nHost: hello.test\r\n\r\nGET /zero HTTP/1.1\r\nHost: hello.test\r\n\r\n")
	got := []rawAnswer{readRaw(t, br, false), readRaw(t, br, false)}
	for i := range got {
		got[i].Header = nil
	}
	want := []rawAnswer{{Code: 204}, {Code: 200, Body: "GET /zero hello.test "}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("warm answers (-want +got):\n%s", d)
	}
}

// TestStaticAnswerH2C: the net/http path (h2c) answers static rules too.
func TestStaticAnswerH2C(t *testing.T) {
	set := staticSet(t, staticanswer.Rule{Name: "health", PathType: staticanswer.PathPrefix, Path: "/healthz", Status: 200, Body: "fine"})
	rt, url, rec := rigProtocols(t, RouterOptions{}, AppConfig{Static: set}, true)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, url+"/healthz/live", nil)
	req.Host = "hello.test"
	resp, err := h2cClient(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "fine" || resp.ProtoMajor != 2 {
		t.Errorf("got %s %d %q, want HTTP/2 200 fine", resp.Proto, resp.StatusCode, b)
	}
	if v := rec.values(); len(v) != 0 || rt.Held() != 0 {
		t.Errorf("held %d, pushes %v: want none", rt.Held(), v)
	}
}

// TestRoutePlaceholderPage: a browser during a cold start gets the
// route's own page (its status, headers, body; Content-Type text/html
// unless it sets one), and the app keeps waking; other clients are held.
func TestRoutePlaceholderPage(t *testing.T) {
	page, err := NewPage(200, [][2]string{{"Refresh", "3"}}, "<p>waking</p>")
	if err != nil {
		t.Fatal(err)
	}
	rt, url, rec := rig(t, RouterOptions{ColdStartTimeout: 200 * time.Millisecond}, AppConfig{Page: page})
	c := dialRaw(t, url)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: hello.test\r\nAccept: text/html\r\n\r\n")
	got := readRaw(t, bufio.NewReader(c), false)
	if got.Code != 200 || got.Header.Get("Refresh") != "3" || got.Header.Get("Content-Type") != "text/html; charset=utf-8" || got.Body != "<p>waking</p>" {
		t.Errorf("browser got %d %v %q", got.Code, got.Header, got.Body)
	}
	if v := rec.values(); len(v) == 0 || v[0] != 1 {
		t.Errorf("the page did not wake the app: pushes %v", v)
	}
	code, hdr, body := do(t, t.Context(), url, "hello.test", "Accept", "text/html")
	if code != 200 || hdr.Get("Refresh") != "3" || body != "<p>waking</p>" {
		t.Errorf("net/http path: got %d %v %q", code, hdr, body)
	}
	if code, _, _ := do(t, t.Context(), url, "hello.test", "Accept", "application/json"); code != http.StatusGatewayTimeout {
		t.Errorf("API client got %d, want to be held (then 504)", code)
	}
	_ = rt
}

// deadAddr is an address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestFallbackAtColdStartTimeout: a held request whose cold-start timeout
// passes goes, whole, to the route's fallback, and the client gets the
// fallback's answer; with the fallback unreachable, the 504 it would have
// got without one.
func TestFallbackAtColdStartTimeout(t *testing.T) {
	fb := newRawApp(t)
	rt, url, _ := rigProtocols(t, RouterOptions{ColdStartTimeout: 100 * time.Millisecond}, AppConfig{Fallback: fb.addr}, true)
	c := dialRaw(t, url)
	io.WriteString(c, "POST /order HTTP/1.1\r\nHost: hello.test\r\nContent-Length: 5\r\n\r\nhello")
	got := readAnswers(t, c, 1)
	if got[0] != (answer{200, "ok"}) {
		t.Errorf("got %+v, want the fallback's 200 ok", got[0])
	}
	if seen := fb.next(t); !strings.HasPrefix(seen, "POST /order HTTP/1.1\r\n") || !strings.HasSuffix(seen, "\r\n\r\nhello") {
		t.Errorf("the fallback got %q", seen)
	}
	// h2c: net/http's path.
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, url+"/x", nil)
	req.Host = "hello.test"
	resp, err := h2cClient(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "ok" || resp.ProtoMajor != 2 {
		t.Errorf("net/http path: got %s %d %q, want the fallback's 200 ok", resp.Proto, resp.StatusCode, b)
	}
	if seen := fb.next(t); !strings.HasPrefix(seen, "GET /x HTTP/1.1\r\n") {
		t.Errorf("the fallback got %q", seen)
	}

	rt.SetRoutes(routesWith(AppConfig{ColdStartTimeout: 100 * time.Millisecond, Fallback: deadAddr(t)}), nil)
	c = dialRaw(t, url)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: hello.test\r\n\r\n")
	if got := readAnswers(t, c, 1); got[0].Code != http.StatusGatewayTimeout || !strings.Contains(got[0].Body, "cold-start timeout") {
		t.Errorf("unreachable fallback: got %+v, want the 504 of the cold-start timeout", got[0])
	}
}

func routesWith(cfg AppConfig) []routing.Route[AppConfig] {
	return []routing.Route[AppConfig]{{Key: shopHello, Hosts: []string{"hello.test"}, Value: cfg}}
}

// TestFallbackWhenQueueFull: a request that finds its app's hold queue
// full goes to the fallback at once; unreachable, it gets the 503 with
// Retry-After.
func TestFallbackWhenQueueFull(t *testing.T) {
	fb := newRawApp(t)
	rt, url, _ := rig(t, RouterOptions{}, AppConfig{QueueSize: 1, Fallback: fb.addr})
	first := dialRaw(t, url)
	io.WriteString(first, "GET /a HTTP/1.1\r\nHost: hello.test\r\n\r\n")
	waitHeld(t, rt, 1)
	c := dialRaw(t, url)
	io.WriteString(c, "GET /b HTTP/1.1\r\nHost: hello.test\r\n\r\n")
	if got := readAnswers(t, c, 1); got[0] != (answer{200, "ok"}) {
		t.Errorf("got %+v, want the fallback's 200 ok", got[0])
	}
	if seen := fb.next(t); !strings.HasPrefix(seen, "GET /b ") {
		t.Errorf("the fallback got %q", seen)
	}
	rt.SetRoutes(routesWith(AppConfig{QueueSize: 1, Fallback: deadAddr(t)}), nil)
	c = dialRaw(t, url)
	io.WriteString(c, "GET /c HTTP/1.1\r\nHost: hello.test\r\n\r\n")
	br := bufio.NewReader(c)
	got := readRaw(t, br, false)
	if got.Code != http.StatusServiceUnavailable || got.Header.Get("Retry-After") == "" {
		t.Errorf("unreachable fallback: got %d %v, want 503 with Retry-After", got.Code, got.Header)
	}
}

// slowHeadApp answers each request's head after delay, then sends body
// pieces every gap (none after the first when gap is 0: it stalls).
func slowHeadApp(t *testing.T, delay, gap time.Duration) string {
	t.Helper()
	return tcptest.Serve(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		time.Sleep(delay)
		io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n")
		for gap > 0 {
			time.Sleep(gap)
			if _, err := io.WriteString(c, "1\r\nb\r\n"); err != nil {
				return
			}
		}
		io.Copy(io.Discard, c)
	})
}

// TestRequestTimeout: a route's request timeout answers 504 when the
// app's head has not come by then, and closes the connection when its
// body has not ended; another route keeps the Router's (none).
func TestRequestTimeout(t *testing.T) {
	rt, url, _ := rig(t, RouterOptions{}, AppConfig{Timeouts: h1.Timeouts{Request: 300 * time.Millisecond}})
	rt.SetEndpoints(shopHello, []Endpoint{{Addr: slowHeadApp(t, time.Second, 0), Ready: true}})
	c := dialRaw(t, url)
	start := time.Now()
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: hello.test\r\n\r\n")
	if got := readAnswers(t, c, 1); got[0].Code != http.StatusGatewayTimeout {
		t.Errorf("got %+v, want 504", got[0])
	}
	if took := time.Since(start); took > 900*time.Millisecond {
		t.Errorf("504 after %v, want about 300ms", took)
	}
	// Head in time, body too long: cut.
	rt.SetEndpoints(shopHello, []Endpoint{{Addr: slowHeadApp(t, 0, 50*time.Millisecond), Ready: true}})
	c = dialRaw(t, url)
	start = time.Now()
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: hello.test\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("head: %v %v", resp, err)
	}
	_, err = io.ReadAll(resp.Body)
	if err == nil {
		t.Error("the body ended cleanly, want it cut")
	}
	if took := time.Since(start); took < 250*time.Millisecond || took > time.Second {
		t.Errorf("cut after %v, want about 300ms", took)
	}
}

// TestStreamIdleTimeout: a streamed response silent both ways for the
// route's stream idle timeout is cut, both connections closed; one that
// keeps sending is not.
func TestStreamIdleTimeout(t *testing.T) {
	rt, url, _ := rig(t, RouterOptions{}, AppConfig{Timeouts: h1.Timeouts{StreamIdle: 300 * time.Millisecond}})
	rt.SetEndpoints(shopHello, []Endpoint{{Addr: slowHeadApp(t, 0, 0), Ready: true}})
	c := dialRaw(t, url)
	start := time.Now()
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: hello.test\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Error("a silent stream ended cleanly, want it cut")
	}
	if took := time.Since(start); took < 250*time.Millisecond || took > 1200*time.Millisecond {
		t.Errorf("cut after %v, want about 300ms", took)
	}
	// A stream that sends every 100ms lives past the timeout.
	rt.SetEndpoints(shopHello, []Endpoint{{Addr: slowHeadApp(t, 0, 100*time.Millisecond), Ready: true}})
	c = dialRaw(t, url)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: hello.test\r\n\r\n")
	resp, err = http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(time.Second))
	n, _ := io.Copy(io.Discard, resp.Body)
	if n < 5 {
		t.Errorf("a live stream got %d bytes in 1s, want it kept", n)
	}
}

// TestResponseHeaderTimeoutPerRoute: the route's response-header timeout
// answers 504; the Router's default applies to routes without one.
func TestResponseHeaderTimeoutPerRoute(t *testing.T) {
	rt, url, _ := rig(t, RouterOptions{ResponseHeaderTimeout: 5 * time.Second}, AppConfig{Timeouts: h1.Timeouts{ResponseHeader: 200 * time.Millisecond}})
	rt.SetEndpoints(shopHello, []Endpoint{{Addr: slowHeadApp(t, time.Second, 0), Ready: true}})
	c := dialRaw(t, url)
	start := time.Now()
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: hello.test\r\n\r\n")
	if got := readAnswers(t, c, 1); got[0].Code != http.StatusGatewayTimeout {
		t.Errorf("got %+v, want 504", got[0])
	}
	if took := time.Since(start); took > 800*time.Millisecond {
		t.Errorf("504 after %v, want about 200ms", took)
	}
}

// TestStaticAnswerAbsoluteForm: a request whose target is in absolute
// form (net/http's path) matches by its path as escaped in it: /healthz
// is answered, /%68ealthz is held.
func TestStaticAnswerAbsoluteForm(t *testing.T) {
	set := staticSet(t, staticanswer.Rule{Name: "health", PathType: staticanswer.Exact, Path: "/healthz", Status: 200, Body: "fine"})
	rt, url, _ := rig(t, RouterOptions{ColdStartTimeout: 200 * time.Millisecond}, AppConfig{Static: set})
	c := dialRaw(t, url)
	io.WriteString(c, "GET http://hello.test/healthz HTTP/1.1\r\nHost: hello.test\r\n\r\n")
	if got := readAnswers(t, c, 1); got[0] != (answer{200, "fine"}) {
		t.Errorf("absolute form: got %+v, want the static answer", got[0])
	}
	c = dialRaw(t, url)
	io.WriteString(c, "GET http://hello.test/%68ealthz HTTP/1.1\r\nHost: hello.test\r\n\r\n")
	waitHeld(t, rt, 1)
	if got := readAnswers(t, c, 1); got[0].Code != http.StatusGatewayTimeout {
		t.Errorf("absolute form, not canonical: got %+v, want held (then 504)", got[0])
	}
}

// TestStreamIdleTimeoutTunnel: a tunnel (after a 101) in which no byte
// goes either way for the route's stream idle timeout is closed, both
// sides: the client and the app each see their connection end.
func TestStreamIdleTimeoutTunnel(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	appEnded := make(chan time.Time, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		io.Copy(io.Discard, br) // silent; ends when the activator closes
		appEnded <- time.Now()
	}()
	rt, url, _ := rig(t, RouterOptions{StreamIdleTimeout: time.Hour}, AppConfig{Timeouts: h1.Timeouts{StreamIdle: 300 * time.Millisecond}})
	rt.SetEndpoints(shopHello, []Endpoint{{Addr: ln.Addr().String(), Ready: true}})
	c := dialRaw(t, url)
	start := time.Now()
	io.WriteString(c, "GET /ws HTTP/1.1\r\nHost: hello.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("client read %v, want the tunnel closed", err)
	}
	if took := time.Since(start); took < 250*time.Millisecond || took > 1500*time.Millisecond {
		t.Errorf("closed after %v, want about 300ms", took)
	}
	select {
	case at := <-appEnded:
		if at.Sub(start) > 2*time.Second {
			t.Errorf("the app's side closed after %v", at.Sub(start))
		}
	case <-time.After(5 * time.Second):
		t.Error("the app's side of the tunnel was not closed")
	}
}

// TestReleasedHeldRequestGetsRouteTimeouts: a request held at zero and
// released is bounded by its route's request timeout from its release
// (not from its arrival: the cold start's wait is bounded apart).
func TestReleasedHeldRequestGetsRouteTimeouts(t *testing.T) {
	rt, url, _ := rig(t, RouterOptions{}, AppConfig{Timeouts: h1.Timeouts{Request: 400 * time.Millisecond}})
	c := dialRaw(t, url)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: hello.test\r\n\r\n")
	waitHeld(t, rt, 1)
	time.Sleep(500 * time.Millisecond) // longer than the request timeout, held
	start := time.Now()
	rt.SetEndpoints(shopHello, []Endpoint{{Addr: slowHeadApp(t, 2*time.Second, 0), Ready: true}})
	if got := readAnswers(t, c, 1); got[0].Code != http.StatusGatewayTimeout {
		t.Errorf("got %+v, want 504", got[0])
	}
	if took := time.Since(start); took < 350*time.Millisecond || took > 1500*time.Millisecond {
		t.Errorf("504 %v after the release, want about 400ms", took)
	}
}

// TestRequestTimeoutH2C: net/http's path (h2c) applies the route's
// request and response-header timeouts too: 504.
func TestRequestTimeoutH2C(t *testing.T) {
	slow := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(3 * time.Second):
		case <-r.Context().Done():
		}
	}))
	slow.Config.Protocols = new(http.Protocols)
	slow.Config.Protocols.SetHTTP1(true)
	slow.Config.Protocols.SetUnencryptedHTTP2(true)
	slow.Start()
	t.Cleanup(slow.Close)
	for name, to := range map[string]h1.Timeouts{"request": {Request: 300 * time.Millisecond}, "response head": {ResponseHeader: 300 * time.Millisecond}} {
		t.Run(name, func(t *testing.T) {
			rt, url, _ := rigProtocols(t, RouterOptions{}, AppConfig{Timeouts: to}, true)
			rt.SetEndpoints(shopHello, []Endpoint{{Addr: strings.TrimPrefix(slow.URL, "http://"), Ready: true}})
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, url+"/", nil)
			req.Host = "hello.test"
			start := time.Now()
			resp, err := h2cClient(t).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusGatewayTimeout || resp.ProtoMajor != 2 {
				t.Errorf("got %s %d, want HTTP/2 504", resp.Proto, resp.StatusCode)
			}
			if took := time.Since(start); took > 1500*time.Millisecond {
				t.Errorf("504 after %v, want about 300ms", took)
			}
		})
	}
}

// outcomes are the outcome labels of ebb_activator_requests_total reg
// exports, with their counts.
func outcomes(t *testing.T, reg prometheus.Gatherer) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != metricRequests {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" {
					out[l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// TestStaticAndFallbackSeriesOnFirstUse: the outcomes static and fallback
// are exported once a request had them, not before.
func TestStaticAndFallbackSeriesOnFirstUse(t *testing.T) {
	reg := prometheus.NewRegistry()
	fb := newRawApp(t)
	set := staticSet(t, staticanswer.Rule{Name: "health", PathType: staticanswer.Exact, Path: "/healthz", Status: 200})
	_, url, _ := rig(t, RouterOptions{Metrics: NewMetrics(reg), ColdStartTimeout: 50 * time.Millisecond}, AppConfig{Static: set, Fallback: fb.addr})
	got := outcomes(t, reg)
	if _, ok := got["static"]; ok {
		t.Error("outcome static exported before any static answer")
	}
	if _, ok := got["fallback"]; ok {
		t.Error("outcome fallback exported before any fallback")
	}
	c := dialRaw(t, url)
	io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: hello.test\r\n\r\nGET /x HTTP/1.1\r\nHost: hello.test\r\n\r\n")
	readAnswers(t, c, 2)
	fb.next(t)
	// The outcome is counted once the exchange has ended, which can be
	// just after the client has read the answer.
	testwait.Check(t, 5*time.Second, func() error {
		got := outcomes(t, reg)
		if got["static"] != 1 || got["fallback"] != 1 || got["timeout"] != 0 {
			return fmt.Errorf("outcomes %v, want static 1, fallback 1, timeout 0", got)
		}
		return nil
	})
}

// TestStreamIdleTimeoutH2C: on net/http's path (h2c), a streamed
// response silent both ways for the route's stream idle timeout is ended,
// the client's stream and the app's request both; the wait for the
// response head is the response-header timeout's, not this one's.
func TestStreamIdleTimeoutH2C(t *testing.T) {
	appDone := make(chan time.Time, 4)
	app := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/late" {
			time.Sleep(600 * time.Millisecond)
			io.WriteString(w, "late")
			return
		}
		w.WriteHeader(200)
		io.WriteString(w, "a")
		http.NewResponseController(w).Flush()
		select {
		case <-r.Context().Done():
			appDone <- time.Now()
		case <-time.After(5 * time.Second):
		}
	}))
	app.Config.Protocols = new(http.Protocols)
	app.Config.Protocols.SetHTTP1(true)
	app.Config.Protocols.SetUnencryptedHTTP2(true)
	app.Start()
	t.Cleanup(app.Close)
	rt, url, _ := rigProtocols(t, RouterOptions{}, AppConfig{Timeouts: h1.Timeouts{StreamIdle: 300 * time.Millisecond}}, true)
	rt.SetEndpoints(shopHello, []Endpoint{{Addr: strings.TrimPrefix(app.URL, "http://"), Ready: true}})
	get := func(path string) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, url+path, nil)
		req.Host = "hello.test"
		return h2cClient(t).Do(req)
	}
	start := time.Now()
	resp, err := get("/stream")
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil {
		t.Errorf("a silent stream ended cleanly (%q), want it cut", b)
	}
	if took := time.Since(start); took < 250*time.Millisecond || took > 2*time.Second {
		t.Errorf("cut after %v, want about 300ms", took)
	}
	select {
	case <-appDone:
	case <-time.After(3 * time.Second):
		t.Error("the app's request was not ended")
	}
	resp, err = get("/late")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "late" {
		t.Errorf("a head later than the stream idle timeout: got %d %q, want 200 late", resp.StatusCode, b)
	}
}
