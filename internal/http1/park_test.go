package http1

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
)

// parkingHandler parks the first request of every connection and hands
// it to the test on parked; every other request it proxies to up.
type parkingHandler struct {
	up     *Upstream
	parked chan *Parked
}

func (h *parkingHandler) ServeRequest(c *Conn, rq *Request) bool {
	if c.served == 1 {
		return c.Park(func(p *Parked) { h.parked <- p })
	}
	return c.RoundTrip(h.up, rq)
}

func (h *parkingHandler) UpstreamError(up *Upstream, err error) string {
	return "ebb-test: the app at " + up.Addr() + " failed: " + err.Error()
}

func startParkingEngine(t *testing.T, appAddr string) (string, *parkingHandler) {
	t.Helper()
	h := &parkingHandler{up: NewUpstream(appAddr), parked: make(chan *Parked, 4)}
	srv := NewServer(testEngineOptions(), h, nil, logr.Discard())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() {
		srv.Close()
		h.up.CloseIdle(time.Now(), 0)
	})
	return ln.Addr().String(), h
}

func (h *parkingHandler) next(t *testing.T) *Parked {
	t.Helper()
	select {
	case p := <-h.parked:
		return p
	case <-time.After(5 * time.Second):
		t.Fatal("no request was parked")
		return nil
	}
}

// TestParkedRequestResumes: a parked request, with a body's start and a
// pipelined request read past its head, reaches the app after Resume with
// exactly the bytes an unparked one does (one parse, the head built then),
// the body's rest sent while it was parked included; the pipelined request
// and the next one follow on the same connection.
func TestParkedRequestResumes(t *testing.T) {
	app := startScriptApp(t, echoPath)
	addr, h := startParkingEngine(t, app.addr)
	const first = "POST /one HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\nX-A: 1\r\n\r\n01234"
	cl := dial(t, addr)
	cl.send(first)
	p := h.next(t)
	cl.send("56789GET /two HTTP/1.1\r\nHost: a\r\n\r\n")
	time.Sleep(20 * time.Millisecond)
	if n := len(app.received()); n != 0 {
		t.Fatalf("the app saw %d connections while the request was parked", n)
	}
	go p.Resume(func(c *Conn, rq *Request) bool { return c.RoundTrip(h.up, rq) })
	wantEq(t, "first response", "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nPOST /one", cl.response("POST"))
	wantEq(t, "second response", "HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nGET /two", cl.response("GET"))
	cl.send("GET /three HTTP/1.1\r\nHost: a\r\n\r\n")
	wantEq(t, "third response", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nGET /three", cl.response("GET"))
	got := app.received()
	if len(got) != 1 {
		t.Fatalf("the app saw %d connections, want 1", len(got))
	}
	want := "POST /one HTTP/1.1\r\nHost: a\r\nX-A: 1\r\nContent-Length: 10\r\nX-Forwarded-For: 127.0.0.1\r\n\r\n0123456789" +
		"GET /two HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 127.0.0.1\r\n\r\n" +
		"GET /three HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 127.0.0.1\r\n\r\n"
	wantEq(t, "the app received", want, got[0])
}

// TestParkedRequestAnswered: Answer on a resumed request keeps the
// connection when its body arrived whole (it is discarded) and closes it,
// saying so, when some of it has not.
func TestParkedRequestAnswered(t *testing.T) {
	app := startScriptApp(t, echoPath)
	addr, h := startParkingEngine(t, app.addr)
	answer := func(c *Conn, _ *Request) bool {
		return c.Answer(504, "Retry-After: 1\r\n", "ebb-test: no pod\n")
	}
	cl := dial(t, addr)
	cl.send("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello")
	go h.next(t).Resume(answer)
	wantEq(t, "whole body", "HTTP/1.1 504 Gateway Timeout\r\nRetry-After: 1\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 17\r\n\r\nebb-test: no pod\n", cl.response("POST"))
	cl.send("GET /next HTTP/1.1\r\nHost: a\r\n\r\n")
	wantEq(t, "next request", "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nGET /next", cl.response("GET"))

	cl = dial(t, addr)
	cl.send("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5000\r\n\r\nhello")
	go h.next(t).Resume(answer)
	got, closed := cl.rest(2 * time.Second)
	if !strings.HasPrefix(got, "HTTP/1.1 504 Gateway Timeout\r\n") || !strings.Contains(got, "\r\nConnection: close\r\n") || !closed {
		t.Errorf("body not all there: %q (closed %v), want a 504 with Connection: close and the connection closed", got, closed)
	}
}

// TestParkedRequestDropped: Drop closes the client's connection and the
// request never reaches the app.
func TestParkedRequestDropped(t *testing.T) {
	app := startScriptApp(t, echoPath)
	addr, h := startParkingEngine(t, app.addr)
	cl := dial(t, addr)
	cl.send("GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	h.next(t).Drop()
	if got, closed := cl.rest(2 * time.Second); got != "" || !closed {
		t.Errorf("got %q (closed %v), want the connection closed with nothing", got, closed)
	}
	if n := len(app.received()); n != 0 {
		t.Errorf("the app saw %d connections", n)
	}
}
