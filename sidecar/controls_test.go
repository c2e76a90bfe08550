package sidecar

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/ebb-dev/ebb/internal/staticanswer"
	"github.com/ebb-dev/ebb/internal/tcptest"
	"github.com/ebb-dev/ebb/internal/testwait"
)

// watchedApp is an app that records the targets it was sent and the most
// requests it served at once; a request to /hold waits until release is
// closed (or one value is sent on it), any other is answered at once.
type watchedApp struct {
	addr    string
	release chan struct{}
	mu      sync.Mutex
	seen    []string
	cur     atomic.Int64
	max     atomic.Int64
}

func startWatchedApp(t *testing.T) *watchedApp {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := &watchedApp{addr: ln.Addr().String(), release: make(chan struct{}, 1000)}
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true)
	srv := &http.Server{Protocols: &protos, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := a.cur.Add(1)
		defer a.cur.Add(-1)
		for {
			m := a.max.Load()
			if n <= m || a.max.CompareAndSwap(m, n) {
				break
			}
		}
		a.mu.Lock()
		a.seen = append(a.seen, r.RequestURI)
		a.mu.Unlock()
		if strings.HasPrefix(r.URL.Path, "/hold") {
			select {
			case <-a.release:
			case <-r.Context().Done():
				return
			}
		}
		io.WriteString(w, "app "+r.RequestURI+"\n")
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return a
}

func (a *watchedApp) targets() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.seen...)
}

func rulesJSON(t *testing.T, rules ...staticanswer.Rule) string {
	t.Helper()
	b, err := json.Marshal(rules)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// dialRaw opens a raw connection to the sidecar.
func dialRaw(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return c, bufio.NewReader(c)
}

// readExactly reads len(want) bytes and compares them with want.
func readExactly(t *testing.T, br *bufio.Reader, want string) {
	t.Helper()
	got := make([]byte, len(want))
	if _, err := io.ReadFull(br, got); err != nil {
		t.Fatalf("reading %q: got %q, %v", want, got, err)
	}
	if string(got) != want {
		t.Fatalf("got\n%q\nwant\n%q", got, want)
	}
}

// readResponse reads one response to a request of method and returns its
// status, headers and body.
func readResponse(t *testing.T, br *bufio.Reader, method string) (*http.Response, string) {
	t.Helper()
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		t.Fatalf("reading a response: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading a body: %v", err)
	}
	return resp, string(b)
}

func metric(t *testing.T, r *running, series string) (string, bool) {
	t.Helper()
	_, body := get(t, http.DefaultClient, "http://"+r.admin+"/metrics")
	for _, l := range strings.Split(body, "\n") {
		if name, v, ok := strings.Cut(l, " "); ok && name == series {
			return v, true
		}
	}
	return "", false
}

// TestStaticAlwaysAnswered: a request an Always rule matches is answered
// by the sidecar with the rule's bytes (no body for HEAD), never reaches
// the app and is not counted; the connection carries the next requests,
// pipelined ones included; each answer is counted by rule.
func TestStaticAlwaysAnswered(t *testing.T) {
	app := startWatchedApp(t)
	o := testOptions(app.addr)
	o.StaticResponses = rulesJSON(t,
		staticanswer.Rule{Name: "healthz", When: staticanswer.Always, PathType: staticanswer.PathPrefix, Path: "/healthz",
			ResponseHeaders: []staticanswer.Header{{Name: "X-Static", Value: "1"}}, Body: "ok\n"},
		staticanswer.Rule{Name: "gone", When: staticanswer.Always, PathType: staticanswer.Exact, Path: "/gone", Method: "GET", Status: 204})
	r := startSidecar(t, o)
	const ok = "HTTP/1.1 200 OK\r\nX-Static: 1\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 3\r\n\r\n"
	c, br := dialRaw(t, r.addr)
	io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n")
	readExactly(t, br, ok+"ok\n")
	// Pipelined: HEAD answered without a body, a 204, then one for the app.
	io.WriteString(c, "HEAD /healthz/live?x=1 HTTP/1.1\r\nHost: a\r\n\r\nGET /gone HTTP/1.1\r\nHost: a\r\n\r\nGET /api HTTP/1.1\r\nHost: a\r\n\r\n")
	readExactly(t, br, ok)
	readExactly(t, br, "HTTP/1.1 204 No Content\r\n\r\n")
	if resp, body := readResponse(t, br, "GET"); resp.StatusCode != 200 || body != "app /api\n" {
		t.Fatalf("after the static answers: %d %q, want the app's 200", resp.StatusCode, body)
	}
	// A body that came whole is read past; Connection: close is honoured.
	io.WriteString(c, "POST /healthz HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\n\r\nbodyGET /healthz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
	readExactly(t, br, ok+"ok\n")
	readExactly(t, br, strings.Replace(ok, "\r\n\r\n", "\r\nConnection: close\r\n\r\n", 1)+"ok\n")
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("after Connection: close: %v, want EOF", err)
	}
	// An absolute-form target is matched by its path, as the activator
	// matches it; not in canonical form, or its path not where it seems,
	// it goes to the app.
	c2, br2 := dialRaw(t, r.addr)
	io.WriteString(c2, "GET http://a/healthz?x HTTP/1.1\r\nHost: a\r\n\r\n")
	readExactly(t, br2, ok+"ok\n")
	for _, target := range []string{"http://a/%68ealthz", "http://a?/healthz", "ftp://a/healthz"} {
		io.WriteString(c2, "GET "+target+" HTTP/1.1\r\nHost: a\r\n\r\n")
		if resp, _ := readResponse(t, br2, "GET"); resp.StatusCode == 200 && resp.Header.Get("X-Static") != "" {
			t.Errorf("%s: the static answer", target)
		}
	}
	// The gauge drops just after the client has the whole response.
	testwait.For(t, 5*time.Second, "nothing in flight", func() bool { return readStats(t, r).InFlight == 0 })
	if s := readStats(t, r); s.Total != 4 {
		t.Errorf("stats %+v: want the app's requests only (4)", s)
	}
	for series, want := range map[string]string{`ebb_sidecar_static_responses_total{rule="healthz"}`: "5", `ebb_sidecar_static_responses_total{rule="gone"}`: "1", "ebb_sidecar_requests_total": "4"} {
		if got, _ := metric(t, r, series); got != want {
			t.Errorf("%s = %q, want %s", series, got, want)
		}
	}
}

// TestStaticAlwaysOverH2C: an h2c request an Always rule matches is
// answered by the sidecar too.
func TestStaticAlwaysOverH2C(t *testing.T) {
	app := startWatchedApp(t)
	o := testOptions(app.addr)
	o.StaticResponses = rulesJSON(t, staticanswer.Rule{Name: "healthz", When: staticanswer.Always, Path: "/healthz", Status: 418, Body: "tea\n"})
	r := startSidecar(t, o)
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	c := &http.Client{Transport: &http.Transport{Protocols: &protos}}
	if code, body := get(t, c, "http://"+r.addr+"/healthz"); code != 418 || body != "tea\n" {
		t.Errorf("h2c /healthz: %d %q, want the static 418", code, body)
	}
	if code, body := get(t, c, "http://"+r.addr+"/x"); code != 200 || body != "app /x\n" {
		t.Errorf("h2c /x: %d %q, want the app's", code, body)
	}
	if d := cmp.Diff([]string{"/x"}, app.targets()); d != "" {
		t.Errorf("the app's requests (-want +got):\n%s", d)
	}
	if s := readStats(t, r); s.Total != 1 {
		t.Errorf("stats %+v: want 1 request counted", s)
	}
}

// TestStaticAtZeroExemptsWhileWarm: a request an AtZero rule without
// header conditions matches reaches the warm app and is counted neither in
// flight nor in the total; one whose rule matches a header is counted, as
// is every request whose path is not in canonical form, whatever it spells.
func TestStaticAtZeroExemptsWhileWarm(t *testing.T) {
	app := startWatchedApp(t)
	o := testOptions(app.addr)
	o.StaticResponses = rulesJSON(t,
		staticanswer.Rule{Name: "probe", Path: "/hold/healthz"},
		staticanswer.Rule{Name: "lb", Path: "/lb", Headers: []staticanswer.Header{{Name: "X-Probe", Value: "lb"}}},
		staticanswer.Rule{Name: "live", When: staticanswer.Always, PathType: staticanswer.PathPrefix, Path: "/live"})
	r := startSidecar(t, o)
	c, br := dialRaw(t, r.addr)
	io.WriteString(c, "GET /hold/healthz HTTP/1.1\r\nHost: a\r\n\r\n")
	testwait.For(t, 5*time.Second, "the app has the probe", func() bool { return app.cur.Load() == 1 })
	if s := readStats(t, r); s.InFlight != 0 || s.Total != 0 {
		t.Errorf("while the exempt probe is at the app: %+v, want nothing counted", s)
	}
	app.release <- struct{}{}
	if resp, _ := readResponse(t, br, "GET"); resp.StatusCode != 200 {
		t.Fatalf("probe: %d", resp.StatusCode)
	}
	io.WriteString(c, "GET /lb HTTP/1.1\r\nHost: a\r\nX-Probe: lb\r\n\r\n")
	readResponse(t, br, "GET")
	if s := readStats(t, r); s.Total != 1 {
		t.Errorf("after a request of a header rule: total %d, want 1 (a header never exempts)", s.Total)
	}
	// Each would match a rule's path read literally, or once decoded.
	noncanonical := []string{"/hold/%68ealthz", "//hold/healthz", "/hold/healthz/../x", "/hold/healthz/./x", "/hold/healthz//x",
		"/%6Cive", "//live", "/live/../api", "/live/%2e%2e/api", "/live/.", "/live\\..\\api"}
	for _, p := range noncanonical {
		if strings.HasPrefix(p, "/hold") || strings.HasPrefix(p, "//hold") {
			app.release <- struct{}{}
		}
		io.WriteString(c, "GET "+p+" HTTP/1.1\r\nHost: a\r\n\r\n")
		if resp, body := readResponse(t, br, "GET"); resp.StatusCode != 200 || body != "app "+p+"\n" {
			t.Errorf("%s: %d %q, want the app's answer", p, resp.StatusCode, body)
		}
	}
	if s := readStats(t, r); s.Total != uint64(1+len(noncanonical)) {
		t.Errorf("total %d, want %d: every non-canonical path counted", s.Total, 1+len(noncanonical))
	}
	if d := cmp.Diff(append([]string{"/hold/healthz", "/lb"}, noncanonical...), app.targets()); d != "" {
		t.Errorf("the app's requests (-want +got):\n%s", d)
	}
}

// TestStaticAtZeroPathParametersCounted: a path with a ';' parameter
// matches no rule. Tomcat, Jetty and Spring strip ";params" from each
// segment before they resolve dot segments, so "/healthz/..;/admin" is
// their /admin: were it matched as /healthz's, an AtZero rule on /healthz
// would let it reach the app uncounted.
func TestStaticAtZeroPathParametersCounted(t *testing.T) {
	app := startWatchedApp(t)
	o := testOptions(app.addr)
	o.StaticResponses = rulesJSON(t, staticanswer.Rule{Name: "probe", Path: "/healthz"})
	r := startSidecar(t, o)
	c, br := dialRaw(t, r.addr)
	io.WriteString(c, "GET /healthz/live HTTP/1.1\r\nHost: a\r\n\r\n")
	readResponse(t, br, "GET")
	if s := readStats(t, r); s.Total != 0 {
		t.Fatalf("after the probe: total %d, want 0 (the rule exempts it)", s.Total)
	}
	withParams := []string{"/healthz/..;/admin", "/healthz/.;/..;/admin", "/healthz/..;jsessionid=1/admin", "/healthz/live;x"}
	for _, p := range withParams {
		io.WriteString(c, "GET "+p+" HTTP/1.1\r\nHost: a\r\n\r\n")
		if resp, body := readResponse(t, br, "GET"); resp.StatusCode != 200 || body != "app "+p+"\n" {
			t.Errorf("%s: %d %q, want the app's answer", p, resp.StatusCode, body)
		}
	}
	if s := readStats(t, r); s.Total != uint64(len(withParams)) {
		t.Errorf("total %d, want %d: every path with a ';' parameter counted", s.Total, len(withParams))
	}
	if d := cmp.Diff(append([]string{"/healthz/live"}, withParams...), app.targets()); d != "" {
		t.Errorf("the app's requests (-want +got):\n%s", d)
	}
}

// upgradingApp is an app that answers every request head with 101 and
// then echoes the tunnel's bytes.
func upgradingApp(t *testing.T) string {
	t.Helper()
	return tcptest.Serve(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			l, err := br.ReadString('\n')
			if err != nil {
				return
			}
			if l == "\r\n" {
				break
			}
		}
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
		io.Copy(c, br)
	})
}

// TestStaticAtZeroUpgradeCounted: an upgrade on a path an AtZero rule
// matches is counted in flight for as long as its tunnel is open, as any
// WebSocket: the rule exempts a probe, not a tunnel through the app.
func TestStaticAtZeroUpgradeCounted(t *testing.T) {
	o := testOptions(upgradingApp(t))
	o.StaticResponses = rulesJSON(t, staticanswer.Rule{Name: "probe", Path: "/healthz"})
	r := startSidecar(t, o)
	c, br := dialRaw(t, r.addr)
	io.WriteString(c, "GET /healthz/ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	io.WriteString(c, "ping")
	readExactly(t, br, "ping")
	if s := readStats(t, r); s.InFlight != 1 || s.Total != 1 {
		t.Errorf("while the tunnel is open: %+v, want 1 in flight, total 1", s)
	}
	c.Close()
	testwait.For(t, 5*time.Second, "the tunnel no longer in flight", func() bool { return readStats(t, r).InFlight == 0 })
}

// TestStaticAtZeroBodyCounted: a request with a body (Content-Length over
// 0, or chunked) on a path an AtZero rule matches is counted, so that no
// upload reaches the app uncounted; a GET, a HEAD and a POST with
// Content-Length 0 are a probe's, exempt.
func TestStaticAtZeroBodyCounted(t *testing.T) {
	app := startWatchedApp(t)
	o := testOptions(app.addr)
	o.StaticResponses = rulesJSON(t, staticanswer.Rule{Name: "probe", Path: "/healthz"})
	r := startSidecar(t, o)
	c, br := dialRaw(t, r.addr)
	for _, rq := range []struct{ method, raw string }{
		{"GET", "GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n"},
		{"HEAD", "HEAD /healthz HTTP/1.1\r\nHost: a\r\n\r\n"},
		{"POST", "POST /healthz HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n"},
	} {
		io.WriteString(c, rq.raw)
		readResponse(t, br, rq.method)
	}
	if s := readStats(t, r); s.Total != 0 {
		t.Fatalf("after requests without a body: total %d, want 0 (the rule exempts them)", s.Total)
	}
	io.WriteString(c, "POST /healthz HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello")
	readResponse(t, br, "POST")
	io.WriteString(c, "POST /healthz/x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
	readResponse(t, br, "POST")
	if s := readStats(t, r); s.Total != 2 {
		t.Errorf("after a request with a Content-Length body and a chunked one: total %d, want 2", s.Total)
	}
	if d := cmp.Diff([]string{"/healthz", "/healthz", "/healthz", "/healthz", "/healthz/x"}, app.targets()); d != "" {
		t.Errorf("the app's requests (-want +got):\n%s", d)
	}
}

// TestStaticAtZeroH2CBodyCounted: over h2c, a stream whose HEADERS end it
// is a probe's, exempt by an AtZero rule; one that goes on with a body (DATA
// frames, even an empty one) is counted.
func TestStaticAtZeroH2CBodyCounted(t *testing.T) {
	app := startWatchedApp(t)
	o := testOptions(app.addr)
	o.StaticResponses = rulesJSON(t, staticanswer.Rule{Name: "probe", Path: "/healthz"})
	r := startSidecar(t, o)
	conn, fr := h2cHandshake(t, r.addr)
	writeHeaders(t, fr, 1, true, ":method", "GET", ":scheme", "http", ":authority", "a", ":path", "/healthz")
	if status, _, _ := h2cEvent(t, conn, fr, 1, 5*time.Second); status != "200" {
		t.Fatalf("probe: status %q", status)
	}
	if s := readStats(t, r); s.Total != 0 {
		t.Fatalf("after a stream without a body: total %d, want 0 (the rule exempts it)", s.Total)
	}
	writeHeaders(t, fr, 3, false, ":method", "POST", ":scheme", "http", ":authority", "a", ":path", "/healthz")
	if err := fr.WriteData(3, true, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if status, _, _ := h2cEvent(t, conn, fr, 3, 5*time.Second); status != "200" {
		t.Fatalf("POST: status %q", status)
	}
	writeHeaders(t, fr, 5, false, ":method", "GET", ":scheme", "http", ":authority", "a", ":path", "/healthz")
	if err := fr.WriteData(5, true, nil); err != nil {
		t.Fatal(err)
	}
	if status, _, _ := h2cEvent(t, conn, fr, 5, 5*time.Second); status != "200" {
		t.Fatalf("GET with an empty DATA frame: status %q", status)
	}
	if s := readStats(t, r); s.Total != 2 {
		t.Errorf("after two streams with a body: total %d, want 2", s.Total)
	}
}

// TestConcurrencyLimit: with a limit of 1, twenty concurrent requests
// all reach the app, one at a time, in order of arrival; the queued ones
// count as in flight and show as queued.
func TestConcurrencyLimit(t *testing.T) {
	app := startWatchedApp(t)
	o := testOptions(app.addr)
	o.Concurrency = 1
	r := startSidecar(t, o)
	const n = 20
	var wg sync.WaitGroup
	codes := make([]int, n)
	for i := range n {
		c, br := dialRaw(t, r.addr)
		io.WriteString(c, "GET /hold/"+string(rune('a'+i))+" HTTP/1.1\r\nHost: a\r\n\r\n")
		if i == 0 {
			testwait.For(t, 5*time.Second, "the first at the app", func() bool { return app.cur.Load() == 1 })
		} else {
			// Queued in the order sent.
			testwait.For(t, 5*time.Second, "queued", func() bool { return r.s.p.ctl.lim.queued.Load() == int64(i) })
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.ReadResponse(br, nil)
			if err == nil {
				codes[i] = resp.StatusCode
				io.Copy(io.Discard, resp.Body)
			}
		}()
	}
	testwait.For(t, 5*time.Second, "19 queued", func() bool {
		v, _ := metric(t, r, "ebb_sidecar_queued_requests")
		return v == "19"
	})
	if s := readStats(t, r); s.InFlight != n {
		t.Errorf("in flight %d, want %d: queued requests count", s.InFlight, n)
	}
	if v, _ := metric(t, r, "ebb_sidecar_concurrency_limit"); v != "1" {
		t.Errorf("ebb_sidecar_concurrency_limit %q, want 1", v)
	}
	if _, body := get(t, http.DefaultClient, "http://"+r.admin+"/stats?detail"); !strings.Contains(body, "in_flight 20\n") || !strings.Contains(body, "concurrency_limit 1\nqueued 19\nqueue_limit 100\n") {
		t.Errorf("/stats?detail:\n%s\nwant the limit, 19 queued and 20 in flight", body)
	}
	for range n {
		app.release <- struct{}{}
	}
	wg.Wait()
	for i, code := range codes {
		if code != 200 {
			t.Errorf("request %d: %d, want 200", i, code)
		}
	}
	if m := app.max.Load(); m != 1 {
		t.Errorf("the app served %d at once, want 1", m)
	}
	var want []string
	for i := range n {
		want = append(want, "/hold/"+string(rune('a'+i)))
	}
	if d := cmp.Diff(want, app.targets()); d != "" {
		t.Errorf("the app's requests, in order (-want +got):\n%s", d)
	}
	testwait.For(t, 5*time.Second, "nothing in flight", func() bool { return readStats(t, r).InFlight == 0 })
}

// TestConcurrencyQueueFull: past the limit and the queue, 503 with
// Retry-After at once, and the app never sees the request; a client that
// leaves while queued leaves the queue and the count.
func TestConcurrencyQueueFull(t *testing.T) {
	app := startWatchedApp(t)
	o := testOptions(app.addr)
	o.Concurrency, o.ConcurrencyQueue = 1, 1
	r := startSidecar(t, o)
	c1, br1 := dialRaw(t, r.addr)
	io.WriteString(c1, "GET /hold/1 HTTP/1.1\r\nHost: a\r\n\r\n")
	testwait.For(t, 5*time.Second, "the first at the app", func() bool { return app.cur.Load() == 1 })
	c2, _ := dialRaw(t, r.addr)
	io.WriteString(c2, "GET /hold/2 HTTP/1.1\r\nHost: a\r\n\r\n")
	testwait.For(t, 5*time.Second, "one queued", func() bool { v, _ := metric(t, r, "ebb_sidecar_queued_requests"); return v == "1" })
	c3, br3 := dialRaw(t, r.addr)
	io.WriteString(c3, "GET /hold/3 HTTP/1.1\r\nHost: a\r\n\r\n")
	resp, body := readResponse(t, br3, "GET")
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" || !strings.Contains(body, "concurrency limit (1)") {
		t.Errorf("past the queue: %d Retry-After %q %q, want 503, 1 and the limit named", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	// The queued client leaves.
	c2.Close()
	testwait.For(t, 5*time.Second, "the queue empty", func() bool { v, _ := metric(t, r, "ebb_sidecar_queued_requests"); return v == "0" })
	testwait.For(t, 5*time.Second, "1 in flight (the one at the app)", func() bool { return readStats(t, r).InFlight == 1 })
	if s := readStats(t, r); s.Total != 3 {
		t.Errorf("stats %+v: want 3 received", s)
	}
	app.release <- struct{}{}
	readResponse(t, br1, "GET")
	c4, br4 := dialRaw(t, r.addr)
	io.WriteString(c4, "GET /after HTTP/1.1\r\nHost: a\r\n\r\n")
	if resp, _ := readResponse(t, br4, "GET"); resp.StatusCode != 200 {
		t.Errorf("after: %d, want 200 (the place of the client who left was given back)", resp.StatusCode)
	}
	if d := cmp.Diff([]string{"/hold/1", "/after"}, app.targets()); d != "" {
		t.Errorf("the app's requests (-want +got):\n%s", d)
	}
}

// stallingApp answers each request's head after headDelay, then half of
// a 10-byte body, and then nothing until the test ends; closed gets one
// value per app connection the sidecar closed.
func stallingApp(t *testing.T, headDelay time.Duration) (addr string, closed chan struct{}) {
	t.Helper()
	closed = make(chan struct{}, 100)
	addr = tcptest.Serve(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		line, err := br.ReadString('\n')
		if err != nil || skipHead(br) != nil {
			return
		}
		switch {
		case strings.HasPrefix(line, "GET /ws "):
			io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: x\r\n\r\n")
		case strings.HasPrefix(line, "GET /head "):
			time.Sleep(headDelay)
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n12345")
		}
		io.Copy(io.Discard, br) // until the sidecar closes
		closed <- struct{}{}
	})
	return addr, closed
}

// TestRequestTimeout: before the app's response head, the client gets
// 504 naming the timeout; after it, both connections are closed at the
// deadline. The count drops either way.
func TestRequestTimeout(t *testing.T) {
	addr, closed := stallingApp(t, 2*time.Second)
	o := testOptions(addr)
	o.RequestTimeout = 300 * time.Millisecond
	r := startSidecar(t, o)

	c, br := dialRaw(t, r.addr)
	start := time.Now()
	io.WriteString(c, "GET /nohead HTTP/1.1\r\nHost: a\r\n\r\n")
	resp, body := readResponse(t, br, "GET")
	if took := time.Since(start); resp.StatusCode != 504 || !strings.Contains(body, "request timeout (300ms)") || took > 2*time.Second {
		t.Errorf("no head: %d %q after %v, want 504 naming the request timeout after 300ms", resp.StatusCode, body, took)
	}
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Error("no head: the app's connection was not closed")
	}

	addr2, closed2 := stallingApp(t, 50*time.Millisecond)
	o2 := testOptions(addr2)
	o2.RequestTimeout = 300 * time.Millisecond
	r2 := startSidecar(t, o2)
	c2, br2 := dialRaw(t, r2.addr)
	start = time.Now()
	io.WriteString(c2, "GET /head HTTP/1.1\r\nHost: a\r\n\r\n")
	resp, err := http.ReadResponse(br2, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("head: %v %v", resp, err)
	}
	got, err := io.ReadAll(resp.Body)
	if took := time.Since(start); err == nil || took > 2*time.Second {
		t.Errorf("a body past the deadline: %q, %v after %v, want it cut at 300ms", got, err, took)
	}
	select {
	case <-closed2:
	case <-time.After(5 * time.Second):
		t.Error("the app's connection was not closed")
	}
	testwait.For(t, 5*time.Second, "nothing in flight", func() bool { return readStats(t, r).InFlight == 0 && readStats(t, r2).InFlight == 0 })
}

// TestStreamIdleClosesWebSocket: an upgraded connection over which no
// byte passes either way for the stream idle timeout is closed on both
// sides, and the count drops: what lets an abandoned WebSocket's app
// scale to zero.
func TestStreamIdleClosesWebSocket(t *testing.T) {
	addr, closed := stallingApp(t, 0)
	o := testOptions(addr)
	o.StreamIdleTimeout = 300 * time.Millisecond
	r := startSidecar(t, o)
	c, br := dialRaw(t, r.addr)
	io.WriteString(c, "GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: x\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	if s := readStats(t, r); s.InFlight != 1 {
		t.Errorf("open tunnel: %d in flight, want 1", s.InFlight)
	}
	start := time.Now()
	_, err = br.ReadByte()
	if took := time.Since(start); err == nil || took > 3*time.Second {
		t.Errorf("silent tunnel: read %v after %v, want closed after 300ms", err, took)
	}
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Error("the app's side was not closed")
	}
	testwait.For(t, 5*time.Second, "nothing in flight", func() bool { return readStats(t, r).InFlight == 0 })
}

// TestStreamIdleCutsSilentResponseBody: a response body the app stops
// sending, with nothing coming from the client either, is cut after the
// stream idle timeout, both sides closed.
func TestStreamIdleCutsSilentResponseBody(t *testing.T) {
	addr, closed := stallingApp(t, 0)
	o := testOptions(addr)
	o.StreamIdleTimeout = 300 * time.Millisecond
	r := startSidecar(t, o)
	c, br := dialRaw(t, r.addr)
	io.WriteString(c, "GET /head HTTP/1.1\r\nHost: a\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = io.ReadAll(resp.Body)
	if took := time.Since(start); err == nil || took > 3*time.Second {
		t.Errorf("silent body: %v after %v, want cut after 300ms", err, took)
	}
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Error("the app's side was not closed")
	}
	testwait.For(t, 5*time.Second, "nothing in flight", func() bool { return readStats(t, r).InFlight == 0 })
}

// TestNoControlsByDefault: with no route control set the request path
// has none (one branch on a nil field), and an idle sidecar with every
// control set exports no static-response series until one answers.
func TestNoControlsByDefault(t *testing.T) {
	if c := newControls(DefaultOptions()); c != nil {
		t.Errorf("default options: controls %+v, want none", c)
	}
	app := startWatchedApp(t)
	o := testOptions(app.addr)
	o.StaticResponses = rulesJSON(t, staticanswer.Rule{Name: "healthz", When: staticanswer.Always, Path: "/healthz"})
	r := startSidecar(t, o)
	for _, s := range scrapeSeries(t, r) {
		if strings.HasPrefix(s, "ebb_sidecar_static_responses_total") || strings.HasPrefix(s, "ebb_sidecar_concurrency_limit") || strings.HasPrefix(s, "ebb_sidecar_queued_requests") {
			t.Errorf("idle, without a limit: %s", s)
		}
	}
}

// TestControlledPathAllocatesNothing: a keep-alive request through the
// sidecar with static rules that do not match it, a limit and a request
// timeout set allocates nothing but the timeout's timer; a static answer
// allocates nothing.
func TestControlledPathAllocatesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("measures allocations over 2000 requests")
	}
	o := testOptions(rawUpstream(t, smallResponse))
	o.StaticResponses = `[{"name":"healthz","when":"Always","path":"/healthz"},{"name":"probe","path":"/probe","headers":[{"name":"X-A","value":"1"}]}]`
	o.Concurrency = 100
	r := startSidecar(t, o)
	c, err := net.Dial("tcp", r.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	for _, req := range []string{"GET / HTTP/1.1\r\nHost: a\r\nUser-Agent: test\r\n\r\n", "GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n", "GET /probe HTTP/1.1\r\nHost: a\r\nX-A: 1\r\n\r\n"} {
		b := []byte(req)
		one := func() {
			c.Write(b)
			if code, err := readRaw(br); code != 200 || err != nil {
				t.Fatalf("response %d, %v", code, err)
			}
		}
		for range 100 {
			one()
		}
		if avg := testing.AllocsPerRun(2000, one); avg >= 0.5 {
			t.Errorf("%q: %.2f allocations per request, want 0", req, avg)
		}
	}
}

// TestControlOptions: the options' variables and what is refused.
func TestControlOptions(t *testing.T) {
	env := map[string]string{
		"EBB_STATIC_RESPONSES":    `[{"name":"healthz","when":"Always","path":"/healthz"}]`,
		"EBB_CONCURRENCY":         "4",
		"EBB_CONCURRENCY_QUEUE":   "7",
		"EBB_REQUEST_TIMEOUT":     "30s",
		"EBB_STREAM_IDLE_TIMEOUT": "5m",
	}
	got, err := ParseOptions(nil, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultOptions()
	want.StaticResponses, want.Concurrency, want.ConcurrencyQueue, want.RequestTimeout, want.StreamIdleTimeout = env["EBB_STATIC_RESPONSES"], 4, 7, 30*time.Second, 5*time.Minute
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("options (-want +got):\n%s", d)
	}
	if def := DefaultOptions(); def.Concurrency != 0 || def.ConcurrencyQueue != 100 || def.RequestTimeout != 0 || def.StreamIdleTimeout != time.Hour || def.StaticResponses != "" {
		t.Errorf("defaults: %+v", def)
	}
	_, err = ParseOptions([]string{"--concurrency=-1", "--concurrency-queue=-1", "--request-timeout=-1s", "--stream-idle-timeout=0",
		`--static-responses=[{"name":"a","responseHeaders":[{"name":"Content-Length","value":"1"}]}]`}, func(string) string { return "" })
	if err == nil {
		t.Fatal("no error")
	}
	for _, w := range []string{"--concurrency -1", "--concurrency-queue -1", "--request-timeout -1s", "--stream-idle-timeout 0s", `--static-responses: rule "a": responseHeaders[0]: Content-Length`} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error does not say %q:\n%v", w, err)
		}
	}
}

// h2cEvent reads frames of an h2c connection until stream id gets its
// response head (status), an RST_STREAM (reset) or the deadline passes;
// it answers SETTINGS and PINGs meanwhile.
func h2cEvent(t *testing.T, conn net.Conn, fr *http2.Framer, id uint32, within time.Duration) (status string, hdr map[string]string, reset bool) {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(within))
	if fr.ReadMetaHeaders == nil {
		fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("stream %d: %v", id, err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				fr.WritePing(true, f.Data)
			}
		case *http2.MetaHeadersFrame:
			if f.StreamID == id {
				hdr := map[string]string{}
				for _, h := range f.RegularFields() {
					hdr[h.Name] = h.Value
				}
				return f.PseudoValue("status"), hdr, false
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				return "", nil, true
			}
		}
	}
}

// TestH2CRouteControls: over h2c, the request timeout answers 504 before
// the response head, a stream silent both ways for the stream idle
// timeout is reset, and past the concurrency limit and its queue a
// stream gets 503 with Retry-After; the count drops each time.
func TestH2CRouteControls(t *testing.T) {
	app := startTestApp(t)
	o := testOptions(app.addr)
	o.RequestTimeout = 2 * time.Second
	o.StreamIdleTimeout = 300 * time.Millisecond
	o.Concurrency, o.ConcurrencyQueue = 1, 0
	r := startSidecar(t, o)

	conn, fr := h2cHandshake(t, r.addr)
	start := time.Now()
	writeHeaders(t, fr, 1, true, ":method", "GET", ":scheme", "http", ":authority", "a", ":path", "/slow?d=5s")
	if status, _, _ := h2cEvent(t, conn, fr, 1, 5*time.Second); status != "504" || time.Since(start) > 4*time.Second {
		t.Errorf("past the request timeout: status %q after %v, want 504 after 2s", status, time.Since(start))
	}

	// An SSE stream whose app is silent for 3 s after its first event.
	writeHeaders(t, fr, 3, true, ":method", "GET", ":scheme", "http", ":authority", "a", ":path", "/sse?n=2&interval=3s")
	if status, _, _ := h2cEvent(t, conn, fr, 3, 5*time.Second); status != "200" {
		t.Fatalf("SSE: status %q", status)
	}
	testwait.For(t, 5*time.Second, "the SSE stream counted", func() bool { return readStats(t, r).InFlight == 1 })
	// The limit is taken: the next stream is refused at once.
	writeHeaders(t, fr, 5, true, ":method", "GET", ":scheme", "http", ":authority", "a", ":path", "/")
	if status, hdr, _ := h2cEvent(t, conn, fr, 5, 5*time.Second); status != "503" || hdr["retry-after"] != "1" {
		t.Errorf("past the limit and queue: status %q retry-after %q, want 503 and 1", status, hdr["retry-after"])
	}
	start = time.Now()
	if _, _, reset := h2cEvent(t, conn, fr, 3, 5*time.Second); !reset || time.Since(start) > 2*time.Second {
		t.Errorf("a silent stream: reset %v after %v, want reset at the stream idle timeout (300ms)", reset, time.Since(start))
	}
	testwait.For(t, 5*time.Second, "nothing in flight", func() bool { return readStats(t, r).InFlight == 0 })
}

// TestWaitForDrainWaitsForExemptRequests: a request an AtZero rule leaves
// out of the counts is still waited for by the drain's quiet period.
func TestWaitForDrainWaitsForExemptRequests(t *testing.T) {
	app := startWatchedApp(t)
	o := testOptions(app.addr)
	o.StaticResponses = rulesJSON(t, staticanswer.Rule{Name: "probe", Path: "/hold"})
	o.DrainDelay = 100 * time.Millisecond
	o.DrainTimeout = 400 * time.Millisecond
	r := startSidecar(t, o)
	c, _ := dialRaw(t, r.addr)
	io.WriteString(c, "GET /hold HTTP/1.1\r\nHost: a\r\n\r\n")
	testwait.For(t, 5*time.Second, "the app has the probe", func() bool { return app.cur.Load() == 1 })
	if s := readStats(t, r); s.InFlight != 0 {
		t.Fatalf("exempt request counted: %+v", s)
	}
	start := time.Now()
	code, _ := get(t, http.DefaultClient, "http://"+r.admin+"/wait-for-drain")
	if took := time.Since(start); code != 503 || took < o.DrainTimeout {
		t.Errorf("/wait-for-drain with an exempt request at the app: %d after %v, want 503 after the drain timeout %v", code, took, o.DrainTimeout)
	}
}

// TestQueueWaitCountsTowardRequestTimeout: the request timeout runs from
// the request head, queue included: a request still queued at its end gets
// 504 naming it and never reaches the app.
func TestQueueWaitCountsTowardRequestTimeout(t *testing.T) {
	app := startWatchedApp(t)
	o := testOptions(app.addr)
	o.Concurrency = 1
	o.RequestTimeout = 500 * time.Millisecond
	r := startSidecar(t, o)
	c1, _ := dialRaw(t, r.addr)
	io.WriteString(c1, "GET /hold/1 HTTP/1.1\r\nHost: a\r\n\r\n")
	testwait.For(t, 5*time.Second, "the first at the app", func() bool { return app.cur.Load() == 1 })
	c2, br2 := dialRaw(t, r.addr)
	start := time.Now()
	io.WriteString(c2, "GET /hold/2 HTTP/1.1\r\nHost: a\r\n\r\n")
	resp, body := readResponse(t, br2, "GET")
	if took := time.Since(start); resp.StatusCode != 504 || !strings.Contains(body, "request timeout (500ms)") || took > 2*time.Second {
		t.Errorf("queued past the request timeout: %d %q after %v, want 504 naming it after 500ms", resp.StatusCode, body, took)
	}
	if d := cmp.Diff([]string{"/hold/1"}, app.targets()); d != "" {
		t.Errorf("the app's requests (-want +got):\n%s", d)
	}
	if v, _ := metric(t, r, "ebb_sidecar_queued_requests"); v != "0" {
		t.Errorf("queued %s after the timeout, want 0", v)
	}
}
