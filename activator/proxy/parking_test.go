package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ebb-dev/ebb/internal/routing"
)

// echoApp answers "<method> <path> <host> <body>".
func echoApp(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, "%s %s %s %s", r.Method, r.URL.Path, r.Host, b)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func dialRaw(t *testing.T, url string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	t.Cleanup(func() { c.Close() })
	return c
}

type answer struct {
	Code int
	Body string
}

// readAnswers reads n responses from c.
func readAnswers(t *testing.T, c net.Conn, n int) []answer {
	t.Helper()
	br := bufio.NewReader(c)
	var out []answer
	for range n {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("response %d: %v", len(out)+1, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("response %d body: %v", len(out)+1, err)
		}
		out = append(out, answer{resp.StatusCode, string(b)})
	}
	return out
}

// A held request whose body is still being sent, or fully sent but unread,
// frees its slot the moment its client hangs up, not at the timeout.
func TestClientWithBodyGoneFreesSlotAtOnce(t *testing.T) {
	for name, raw := range map[string]string{
		"body partly sent":  "POST / HTTP/1.1\r\nHost: hello.test\r\nContent-Length: 100000\r\n\r\n" + strings.Repeat("x", 5000),
		"body fully sent":   "POST / HTTP/1.1\r\nHost: hello.test\r\nContent-Length: 5\r\n\r\nhello",
		"chunked, unended":  "POST / HTTP/1.1\r\nHost: hello.test\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
		"no body (control)": "GET / HTTP/1.1\r\nHost: hello.test\r\n\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			rt, url, rec := rig(t, RouterOptions{ColdStartTimeout: time.Minute}, AppConfig{})
			c := dialRaw(t, url)
			io.WriteString(c, raw)
			waitHeld(t, rt, 1)
			start := time.Now()
			c.Close()
			waitHeld(t, rt, 0)
			if took := time.Since(start); took > time.Second {
				t.Errorf("slot freed %s after the client left", took)
			}
			// The slot is freed, then the scalers told (leave): wait for the push.
			waitFor(t, "a second push", func() bool { return len(rec.values()) >= 2 })
			if d := cmp.Diff([]int64{1, 0}, rec.values()); d != "" {
				t.Errorf("pushes (-want +got):\n%s", d)
			}
		})
	}
}

// The same over h2c: the stream's reset frees the slot.
func TestH2CClientWithBodyGoneFreesSlotAtOnce(t *testing.T) {
	rt, url, _ := rigProtocols(t, RouterOptions{ColdStartTimeout: time.Minute}, AppConfig{}, true)
	tr := &http.Transport{}
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetUnencryptedHTTP2(true)
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithCancel(t.Context())
	pr, pw := io.Pipe()
	defer pw.Close()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, pr)
	req.Host = "hello.test"
	errc := make(chan error, 1)
	go func() {
		resp, err := tr.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	go pw.Write([]byte("part of a body"))
	waitHeld(t, rt, 1)
	start := time.Now()
	cancel()
	waitHeld(t, rt, 0)
	if took := time.Since(start); took > time.Second {
		t.Errorf("slot freed %s after the client left", took)
	}
	if err := <-errc; err == nil {
		t.Error("the canceled request got an answer")
	}
}

// Held requests keep their body, the requests pipelined behind them, and
// their connection: after the release both are answered in order and the
// connection serves a third.
func TestHeldBodyAndPipelinedRequestReleasedInOrder(t *testing.T) {
	rt, url, rec := rig(t, RouterOptions{}, AppConfig{})
	c := dialRaw(t, url)
	io.WriteString(c, "POST /one HTTP/1.1\r\nHost: hello.test\r\nContent-Length: 5\r\n\r\nhello"+
		"POST /two HTTP/1.1\r\nHost: hello.test\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n")
	waitHeld(t, rt, 1)
	rt.SetEndpoints(shopHello, []Endpoint{{Addr: echoApp(t), Ready: true}})
	got := readAnswers(t, c, 2)
	io.WriteString(c, "GET /three HTTP/1.1\r\nHost: hello.test\r\n\r\n")
	got = append(got, readAnswers(t, c, 1)...)
	want := []answer{{200, "POST /one hello.test hello"}, {200, "POST /two hello.test abc"}, {200, "GET /three hello.test "}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("answers (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]int64{1, 0}, rec.values()); d != "" {
		t.Errorf("pushes (-want +got):\n%s", d)
	}
}

// A body sent while the request is held, after the head, is forwarded too.
func TestBodySentWhileHeldIsForwarded(t *testing.T) {
	rt, url, _ := rig(t, RouterOptions{}, AppConfig{})
	c := dialRaw(t, url)
	io.WriteString(c, "PUT /x HTTP/1.1\r\nHost: hello.test\r\nContent-Length: 10\r\n\r\n01234")
	waitHeld(t, rt, 1)
	io.WriteString(c, "56789")
	time.Sleep(20 * time.Millisecond)
	rt.SetEndpoints(shopHello, []Endpoint{{Addr: echoApp(t), Ready: true}})
	if d := cmp.Diff([]answer{{200, "PUT /x hello.test 0123456789"}}, readAnswers(t, c, 1)); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

// The cold-start timeout of a held request with a body is a 504 on a
// connection that stays usable.
func TestHeldWithBodyTimesOutKeepingConnection(t *testing.T) {
	rt, url, _ := rig(t, RouterOptions{ColdStartTimeout: 100 * time.Millisecond}, AppConfig{})
	c := dialRaw(t, url)
	io.WriteString(c, "POST / HTTP/1.1\r\nHost: hello.test\r\nContent-Length: 5\r\n\r\nhello")
	got := readAnswers(t, c, 1)
	if got[0].Code != http.StatusGatewayTimeout || !strings.Contains(got[0].Body, "app shop/hello had no ready pod after 1") {
		t.Errorf("got %+v, want 504 naming the app and the wait", got[0])
	}
	rt.SetEndpoints(shopHello, []Endpoint{{Addr: echoApp(t), Ready: true}})
	io.WriteString(c, "GET /after HTTP/1.1\r\nHost: hello.test\r\n\r\n")
	if d := cmp.Diff([]answer{{200, "GET /after hello.test "}}, readAnswers(t, c, 1)); d != "" {
		t.Errorf("next request on the connection (-want +got):\n%s", d)
	}
}

// HTTP/1.0 requests are held and released as HTTP/1.0.
func TestHeldHTTP10(t *testing.T) {
	rt, url, _ := rig(t, RouterOptions{}, AppConfig{})
	c := dialRaw(t, url)
	io.WriteString(c, "GET /old HTTP/1.0\r\nHost: hello.test\r\n\r\n")
	waitHeld(t, rt, 1)
	rt.SetEndpoints(shopHello, []Endpoint{{Addr: echoApp(t), Ready: true}})
	b, err := io.ReadAll(c) // HTTP/1.0 without keep-alive: closed after the answer
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(b), "HTTP/1.0 200 OK\r\n") || !strings.HasSuffix(string(b), "GET /old hello.test ") {
		t.Errorf("got %q", b)
	}
}

// The heads of parked requests share one byte budget (MaxHeldBytes): a
// client sending heads near the data port's MaxHeaderBytes (64 KiB here)
// gets 503 with Retry-After once they fill it, while requests of ordinary
// size are still held, and the budget frees as the held requests leave.
// Without it, 20,000 held requests of 60 KiB heads kept 1.3 GiB (the
// chart's memory limit: 512Mi).
func TestHeldHeadsByteBudget(t *testing.T) {
	rt, url, _ := rig(t, RouterOptions{MaxHeldBytes: 256 << 10}, AppConfig{})
	big := "GET / HTTP/1.1\r\nHost: hello.test\r\nX-Pad: " + strings.Repeat("a", 60<<10) + "\r\n\r\n"
	var held []net.Conn
	for i := range 4 { // 4 × 60 KiB fit in 256 KiB
		c := dialRaw(t, url)
		io.WriteString(c, big)
		waitHeld(t, rt, int64(i+1))
		held = append(held, c)
	}
	c := dialRaw(t, url)
	io.WriteString(c, big)
	if got, want := rawResponse(c), "503 Retry-After: 1 ebb-activator: the activator holds its maximum of 262144 bytes of held requests; retry later\n"; got != want {
		t.Errorf("a large head past the budget: got %q, want %q", got, want)
	}
	for i := range 20 { // ordinary requests still fit
		c := dialRaw(t, url)
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: hello.test\r\n\r\n")
		waitHeld(t, rt, int64(5+i))
		held = append(held, c)
	}
	rt.SetEndpoints(shopHello, []Endpoint{{Addr: echoApp(t), Ready: true}})
	for i, c := range held {
		if got := readAnswers(t, c, 1); got[0].Code != http.StatusOK {
			t.Errorf("held request %d: got %+v, want 200", i, got[0])
		}
	}
	waitHeld(t, rt, 0)
	if n := rt.heldBytes.Load(); n != 0 {
		t.Errorf("bytes held once every request left: %d, want 0", n)
	}
}

// releaseWithoutEndpoint resumes a's parked requests as released, as
// releaseParked does, when a has no ready endpoint any more: the endpoints
// a release saw went before the requests were sent.
func releaseWithoutEndpoint(rt *Router, key routing.Key) {
	rt.mu.Lock()
	a := rt.apps[key]
	rt.mu.Unlock()
	pk := &rt.parking
	for _, p := range pk.take(a, -1) {
		rt.leave(a)
		pk.resume(p, released, "")
	}
}

// A request released and held again, because its app's endpoints went
// between the release and the send, keeps its first start and deadline:
// endpoints that flap cannot hold it past its cold-start timeout. It took
// a fresh start each time (here: 504 after 800 ms of a 500 ms timeout).
func TestHeldAgainKeepsItsDeadline(t *testing.T) {
	rt, url, _ := rig(t, RouterOptions{}, AppConfig{ColdStartTimeout: 500 * time.Millisecond})
	c := dialRaw(t, url)
	start := time.Now()
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: hello.test\r\n\r\n")
	waitHeld(t, rt, 1)
	time.Sleep(300 * time.Millisecond)
	releaseWithoutEndpoint(rt, shopHello)
	waitHeld(t, rt, 1) // held again
	got := readAnswers(t, c, 1)[0]
	took := time.Since(start)
	if got.Code != http.StatusGatewayTimeout || !strings.HasPrefix(got.Body, "ebb-activator: app shop/hello had no ready pod after 5") || took > 700*time.Millisecond {
		t.Errorf("held again 300 ms into a 500 ms cold-start timeout: got %+v after %s, want 504 at 500 ms", got, took.Round(time.Millisecond))
	}
}
