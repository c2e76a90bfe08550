package proxy

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// Raw-TCP tests of the one held-request path: a held HTTP/1.1 request
// stays in the engine that parsed it and is sent by it once released.

// rawApp is an app that records the bytes of each request it gets, as
// received, and answers "ok" closing its connection (so that every
// request comes on a connection of its own and its bytes are exactly
// what the connection carried).
type rawApp struct {
	addr string
	ch   chan string
}

func newRawApp(t *testing.T) *rawApp {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	a := &rawApp{addr: ln.Addr().String(), ch: make(chan string, 16)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				var seen bytes.Buffer
				br := bufio.NewReader(io.TeeReader(c, &seen))
				r, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				if r.Header.Get("Expect") == "100-continue" {
					io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\n")
				}
				if _, err := io.Copy(io.Discard, r.Body); err != nil {
					return
				}
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
				a.ch <- seen.String()
			}()
		}
	}()
	return a
}

func (a *rawApp) next(t *testing.T) string {
	t.Helper()
	select {
	case s := <-a.ch:
		return s
	case <-time.After(5 * time.Second):
		t.Fatal("the app got no request")
		return ""
	}
}

// TestHeldRequestReachesAppAsWarmOneDoes: the bytes the app receives for
// a request held at zero and released are the bytes it receives for the
// same request warm — one parse, framing re-emitted by the same rules,
// the same forwarding headers (the client is the same) — for a GET, a
// body by Content-Length, a chunked body with a chunk extension and a
// trailer (re-framed), Connection-named headers and an HTTP/1.0 request.
// (Before, a held request was re-serialized from net/http's parse and
// sent by httputil.ReverseProxy: other header order and case, Go's
// User-Agent and Accept-Encoding, other framing.)
func TestHeldRequestReachesAppAsWarmOneDoes(t *testing.T) {
	for name, raw := range map[string]string{
		"get":       "GET /a?b=c HTTP/1.1\r\nHost: hello.test\r\nAccept: */*\r\nx-multi: 1\r\nX-Multi: 2\r\n\r\n",
		"length":    "POST /p HTTP/1.1\r\nHost: hello.test\r\nContent-Length: 5\r\nContent-Type: text/plain\r\n\r\nhello",
		"chunked":   "POST /p HTTP/1.1\r\nHost: hello.test\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n3;ext=1\r\nabc\r\n0\r\nX-Sum: 9\r\n\r\n",
		"hop":       "GET / HTTP/1.1\r\nHost: hello.test\r\nConnection: keep-alive, X-Secret\r\nX-Secret: s\r\nKeep-Alive: 5\r\n\r\n",
		"http/1.0":  "GET /old HTTP/1.0\r\nHost: hello.test\r\n\r\n",
		"forwarded": "GET / HTTP/1.1\r\nHost: hello.test\r\nX-Forwarded-For: 10.0.0.1\r\nForwarded: for=10.0.0.1\r\nX-Forwarded-Proto: https\r\n\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			app := newRawApp(t)
			// Held, then released.
			rt, url, _ := rig(t, RouterOptions{}, AppConfig{})
			c := dialRaw(t, url)
			io.WriteString(c, raw)
			waitHeld(t, rt, 1)
			rt.SetEndpoints(shopHello, []Endpoint{{Addr: app.addr, Ready: true}})
			held := app.next(t)
			if got := readAnswers(t, c, 1); got[0].Code != 200 {
				t.Fatalf("held request answered %+v", got[0])
			}
			// The same request warm.
			c = dialRaw(t, url)
			io.WriteString(c, raw)
			warm := app.next(t)
			readAnswers(t, c, 1)
			if d := cmp.Diff(warm, held); d != "" {
				t.Errorf("the app got (-warm +held):\n%s", d)
			}
		})
	}
}

// TestHeldRequestReleasedKeepsAlive: after a held request is released and
// answered, its connection serves the next request (warm now) and the
// held count is back to 0.
func TestHeldRequestReleasedKeepsAlive(t *testing.T) {
	rt, url, rec := rig(t, RouterOptions{}, AppConfig{})
	c := dialRaw(t, url)
	io.WriteString(c, "GET /one HTTP/1.1\r\nHost: hello.test\r\n\r\n")
	waitHeld(t, rt, 1)
	rt.SetEndpoints(shopHello, []Endpoint{{Addr: echoApp(t), Ready: true}})
	got := readAnswers(t, c, 1)
	io.WriteString(c, "GET /two HTTP/1.1\r\nHost: hello.test\r\n\r\n")
	got = append(got, readAnswers(t, c, 1)...)
	if d := cmp.Diff([]answer{{200, "GET /one hello.test "}, {200, "GET /two hello.test "}}, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	if d := cmp.Diff([]int64{1, 0}, rec.values()); d != "" {
		t.Errorf("pushes (-want +got):\n%s", d)
	}
}

// TestHeldPipelinedRequestsReleasedInOrder: a request pipelined behind a
// held one is not read while the first is held; after the release both
// are answered in order on the one connection.
func TestHeldPipelinedRequestsReleasedInOrder(t *testing.T) {
	rt, url, _ := rig(t, RouterOptions{}, AppConfig{})
	c := dialRaw(t, url)
	io.WriteString(c, "GET /one HTTP/1.1\r\nHost: hello.test\r\n\r\nGET /two HTTP/1.1\r\nHost: hello.test\r\n\r\n")
	waitHeld(t, rt, 1)
	time.Sleep(20 * time.Millisecond)
	if n := rt.Held(); n != 1 {
		t.Errorf("held %d, want only the first request", n)
	}
	rt.SetEndpoints(shopHello, []Endpoint{{Addr: echoApp(t), Ready: true}})
	if d := cmp.Diff([]answer{{200, "GET /one hello.test "}, {200, "GET /two hello.test "}}, readAnswers(t, c, 2)); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

// TestHeldChunkedBodySentAfterTheHold: a chunked body that the client
// sends only once its head is held is read after the release, not before,
// and reaches the app.
func TestHeldChunkedBodySentAfterTheHold(t *testing.T) {
	rt, url, _ := rig(t, RouterOptions{}, AppConfig{})
	c := dialRaw(t, url)
	io.WriteString(c, "POST /c HTTP/1.1\r\nHost: hello.test\r\nTransfer-Encoding: chunked\r\n\r\n")
	waitHeld(t, rt, 1)
	io.WriteString(c, "4\r\nbody\r\n")
	rt.SetEndpoints(shopHello, []Endpoint{{Addr: echoApp(t), Ready: true}})
	time.Sleep(20 * time.Millisecond)
	io.WriteString(c, "5\r\n-more\r\n0\r\n\r\n")
	if d := cmp.Diff([]answer{{200, "POST /c hello.test body-more"}}, readAnswers(t, c, 1)); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

// TestHeldExpectContinue: a client that asks for 100-continue gets no 100
// while its request is held (the app has not asked for the body yet); once
// released, the app's 100 Continue reaches it, it sends the body, and the
// app gets it.
func TestHeldExpectContinue(t *testing.T) {
	app := newRawApp(t)
	rt, url, _ := rig(t, RouterOptions{}, AppConfig{})
	c := dialRaw(t, url)
	io.WriteString(c, "PUT /e HTTP/1.1\r\nHost: hello.test\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n")
	waitHeld(t, rt, 1)
	c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if n, err := c.Read(make([]byte, 64)); err == nil {
		t.Fatalf("the client got %d bytes while held", n)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	rt.SetEndpoints(shopHello, []Endpoint{{Addr: app.addr, Ready: true}})
	br := bufio.NewReader(c)
	line, err := br.ReadString('\n')
	if err != nil || line != "HTTP/1.1 100 Continue\r\n" {
		t.Fatalf("first line after the release %q, %v; want 100 Continue", line, err)
	}
	if blank, _ := br.ReadString('\n'); blank != "\r\n" {
		t.Fatalf("100 Continue not followed by the end of its head: %q", blank)
	}
	io.WriteString(c, "data")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := app.next(t); resp.StatusCode != 200 || !strings.HasSuffix(got, "\r\n\r\ndata") {
		t.Errorf("answer %d, the app got %q", resp.StatusCode, got)
	}
}

// TestHeldRequestsCostNoGoroutine: requests held in the engine do not
// keep a goroutine each (nor a read buffer: the engine parks them).
func TestHeldRequestsCostNoGoroutine(t *testing.T) {
	rt, url, _ := rig(t, RouterOptions{}, AppConfig{})
	const n = 200
	// One held request first: the parking's own goroutines start with it.
	c := dialRaw(t, url)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: hello.test\r\n\r\n")
	waitHeld(t, rt, 1)
	time.Sleep(20 * time.Millisecond)
	before := runtime.NumGoroutine()
	for range n {
		c := dialRaw(t, url)
		io.WriteString(c, "POST / HTTP/1.1\r\nHost: hello.test\r\nContent-Length: 10\r\n\r\n01234")
	}
	waitHeld(t, rt, n+1)
	time.Sleep(50 * time.Millisecond)
	if d := runtime.NumGoroutine() - before; d > n/10 {
		t.Errorf("%d held requests added %d goroutines", n, d)
	}
}

// TestHeldClientGoneIsNotForwarded: a held request whose client left is
// never sent to the app once it is ready.
func TestHeldClientGoneIsNotForwarded(t *testing.T) {
	app := newRawApp(t)
	rt, url, _ := rig(t, RouterOptions{}, AppConfig{})
	c := dialRaw(t, url)
	io.WriteString(c, "GET /gone HTTP/1.1\r\nHost: hello.test\r\n\r\n")
	waitHeld(t, rt, 1)
	c.Close()
	waitHeld(t, rt, 0)
	rt.SetEndpoints(shopHello, []Endpoint{{Addr: app.addr, Ready: true}})
	select {
	case got := <-app.ch:
		t.Errorf("the app got the request of a client that left: %q", got)
	case <-time.After(100 * time.Millisecond):
	}
}
