package http1

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ebb-dev/ebb/internal/testwait"
)

// Behaviour of the engine that ebb-sidecar and ebb-activator share, on real
// sockets: heads it refuses, timeouts, pooled connections the app closes,
// bodies until close, 100-continue and HTTP/1.0, trailers and HEAD.

func TestBadHeadsAnswered(t *testing.T) {
	app := startScriptApp(t, echoPath)
	o := testEngineOptions()
	o.MaxHeaderBytes = 4096
	e := startEngine(t, app.addr, o)
	tests := []struct{ name, raw, want string }{
		{"oversized headers", "GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 5000) + "\r\n\r\n", "431 Request Header Fields Too Large"},
		{"many headers", "GET / HTTP/1.1\r\nHost: x\r\n" + strings.Repeat("X-A: b\r\n", 600) + "\r\n", "431 Request Header Fields Too Large"},
		{"garbage request line", "HELLO\r\n\r\n", "400 Bad Request"},
		{"space in target", "GET /a b HTTP/1.1\r\nHost: x\r\n\r\n", "400 Bad Request"},
		{"bad content-length", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1x\r\n\r\n", "400 Bad Request"},
		{"unknown transfer-encoding", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", "501 Not Implemented"},
		{"space before colon", "GET / HTTP/1.1\r\nHost : x\r\n\r\n", "400 Bad Request"},
		{"HTTP/3", "GET / HTTP/3.0\r\nHost: x\r\n\r\n", "505 HTTP Version Not Supported"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cl := dial(t, e.addr)
			cl.send(tt.raw)
			got, closed := cl.rest(2 * time.Second)
			if !strings.HasPrefix(got, "HTTP/1.1 "+tt.want+"\r\n") || !strings.Contains(got, "\r\n\r\nebb-test: ") || !closed {
				t.Errorf("got %q (closed %v), want %q from ebb-test and the connection closed", got, closed, tt.want)
			}
		})
	}
	if n := len(app.received()); n != 0 {
		t.Errorf("the app saw %d connections, want none", n)
	}
}

func TestSlowClientsAreCut(t *testing.T) {
	app := startScriptApp(t, echoPath)
	o := testEngineOptions()
	o.HeaderTimeout = 200 * time.Millisecond
	o.IdleTimeout = 400 * time.Millisecond
	e := startEngine(t, app.addr, o)
	cut := func(name, send string, want time.Duration) {
		cl := dial(t, e.addr)
		start := time.Now()
		if send != "" {
			cl.send(send)
		}
		rest, closed := cl.rest(5 * time.Second)
		took := time.Since(start)
		if !closed || took < want || took > want+time.Second {
			t.Errorf("%s: closed %v after %v (read %q), want about %v", name, closed, took, rest, want)
		}
	}
	cut("slow head", "GET / HTTP/1.1\r\nHost: x\r\n", o.HeaderTimeout)
	cut("idle connection", "", o.IdleTimeout)
	cut("stalled body", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc", o.IdleTimeout)
}

// rawApp answers every request head with resp and, with closeAfter, closes
// the connection without saying so.
func rawApp(t *testing.T, resp string, closeAfter bool) string {
	t.Helper()
	return rawConnApp(t, func(c net.Conn, _ <-chan struct{}) {
		defer c.Close()
		br := bufio.NewReader(c)
		for {
			if _, err := http.ReadRequest(br); err != nil {
				return
			}
			io.WriteString(c, resp)
			if closeAfter {
				return
			}
		}
	})
}

// keepAliveRaceApp answers the first request of each connection with resp
// and closes the connection when the second one comes, without an answer
// (its keep-alive timeout fired as the request arrived): a pooled
// connection that looked clean when it was taken. With reset, it closes
// with a reset.
func keepAliveRaceApp(t *testing.T, resp string, reset bool) (addr string, conns *atomic.Int32) {
	t.Helper()
	conns = new(atomic.Int32)
	addr = rawConnApp(t, func(c net.Conn, _ <-chan struct{}) {
		defer c.Close()
		conns.Add(1)
		br := bufio.NewReader(c)
		for i := 0; ; i++ {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			io.Copy(io.Discard, req.Body)
			if i == 1 {
				if reset {
					c.(*net.TCPConn).SetLinger(0)
				}
				return
			}
			io.WriteString(c, resp)
		}
	})
	return addr, conns
}

// TestAppClosesPooledConnection: the app closes a pooled connection as the
// next request arrives on it, before any byte of an answer: an idempotent
// request is sent again on a fresh connection and answered; a POST, which
// the app may have acted on, gets a 502 and is not sent twice.
func TestAppClosesPooledConnection(t *testing.T) {
	const ok = "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n"
	for _, reset := range []bool{false, true} {
		name := "FIN"
		if reset {
			name = "reset"
		}
		t.Run(name, func(t *testing.T) {
			app, conns := keepAliveRaceApp(t, ok, reset)
			e := startEngine(t, app, testEngineOptions())
			cl := dial(t, e.addr)
			for i := range 3 {
				cl.send("GET / HTTP/1.1\r\nHost: a\r\n\r\n")
				wantEq(t, "response", ok, cl.response("GET"))
				// Every request but the first went to the pooled
				// connection of the one before, and again to a new one.
				if n := conns.Load(); n != int32(i+1) {
					t.Errorf("request %d: the app saw %d connections, want %d", i, n, i+1)
				}
			}
			cl.send("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nhi")
			if got := cl.response("POST"); !strings.HasPrefix(got, "HTTP/1.1 502 Bad Gateway\r\n") {
				t.Errorf("POST on a connection the app closes: %q, want a 502", got)
			}
			if n := conns.Load(); n != 3 {
				t.Errorf("the app saw %d connections, want 3: a POST is not sent again", n)
			}
		})
	}
}

// TestCloseDelimitedResponse: a body until the app closes reaches an
// HTTP/1.1 client chunked, in an HTTP/1.1 head, and the client's
// connection carries the next request (to a fresh app connection).
func TestCloseDelimitedResponse(t *testing.T) {
	e := startEngine(t, rawApp(t, "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil close\n", true), testEngineOptions())
	cl := dial(t, e.addr)
	for range 3 {
		cl.send("GET / HTTP/1.1\r\nHost: a\r\n\r\n")
		wantEq(t, "response", "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\nc\r\nuntil close\n\r\n0\r\n\r\n", cl.response("GET"))
	}
}

func TestExpectContinueAndHTTP10(t *testing.T) {
	// An app that answers 100 Continue itself, as net/http does.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.Copy(w, r.Body) })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	e := startEngine(t, ln.Addr().String(), testEngineOptions())
	cl := dial(t, e.addr)
	cl.send("POST /read HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
	cl.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := cl.br.ReadString('\n')
	if err != nil || line != "HTTP/1.1 100 Continue\r\n" {
		t.Fatalf("first line %q, %v; want 100 Continue", line, err)
	}
	cl.br.ReadString('\n')
	cl.send("hello")
	if got := cl.response("POST"); !strings.HasSuffix(got, "\r\n\r\nhello") {
		t.Errorf("body after 100-continue: %q", got)
	}

	cl = dial(t, e.addr)
	cl.send("GET / HTTP/1.0\r\n\r\n")
	got, closed := cl.rest(2 * time.Second)
	if !strings.HasPrefix(got, "HTTP/1.0 200 OK\r\n") || !closed {
		t.Errorf("HTTP/1.0: %q (closed %v), want a response and the connection closed", got, closed)
	}
}

func TestChunkedTrailersAndHead(t *testing.T) {
	app := startScriptApp(t, func(c net.Conn, req *http.Request) {
		if req.Method == "HEAD" {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nTrailer: X-Sum\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nbody\n\r\n0\r\nX-Sum: 42\r\n\r\n")
	})
	e := startEngine(t, app.addr, testEngineOptions())
	cl := dial(t, e.addr)
	cl.send("GET /trailer HTTP/1.1\r\nHost: a\r\n\r\n")
	wantEq(t, "chunked with a trailer", "HTTP/1.1 200 OK\r\nTrailer: X-Sum\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nbody\n\r\n0\r\nX-Sum: 42\r\n\r\n", cl.response("GET"))
	cl.send("HEAD /big HTTP/1.1\r\nHost: a\r\n\r\n")
	wantEq(t, "HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n", cl.response("HEAD"))
	// The client connection is still good after HEAD (no body was waited
	// for).
	cl.send("GET /trailer HTTP/1.1\r\nHost: a\r\n\r\n")
	if got := cl.response("GET"); !strings.HasPrefix(got, "HTTP/1.1 200 OK\r\n") {
		t.Errorf("after HEAD: %q", got)
	}
}

// TestPoolReuse: what goes back to the pool and what does not, seen from
// the app's connections. A response followed by bytes in the same segment
// (read with it) costs the app its connection; a connection whose pool was
// closed during the exchange (CloseIdle(0): the upstream is gone) is
// closed after it; request and response heads larger than the buffers
// leave the connection clean for the next request.
func TestPoolReuse(t *testing.T) {
	t.Run("bytes after the response in the same segment", func(t *testing.T) {
		app := startScriptApp(t, func(c net.Conn, req *http.Request) {
			if req.URL.Path == "/extra" {
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nOKHTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nINJECTED")
				return
			}
			echoPath(c, req)
		})
		e := startEngine(t, app.addr, testEngineOptions())
		cl := dial(t, e.addr)
		cl.send("GET /extra HTTP/1.1\r\nHost: a\r\n\r\n")
		wantEq(t, "response", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nOK", cl.response("GET"))
		fresh(t, e, "/b")
		if n := len(app.received()); n != 2 {
			t.Errorf("the app saw %d connections, want 2: the one with extra bytes is not pooled", n)
		}
		if n := e.h.up.Idle(); n != 1 {
			t.Errorf("%d pooled connections, want 1", n)
		}
	})
	t.Run("pool closed during the exchange", func(t *testing.T) {
		release := make(chan struct{})
		app := startScriptApp(t, func(c net.Conn, req *http.Request) {
			if req.URL.Path == "/wait" {
				<-release
			}
			echoPath(c, req)
		})
		e := startEngine(t, app.addr, testEngineOptions())
		cl := dial(t, e.addr)
		cl.send("GET /wait HTTP/1.1\r\nHost: a\r\n\r\n")
		testwait.For(t, time.Second, "request in flight", func() bool { return e.h.inFlight.Load() == 1 })
		e.h.up.CloseIdle(time.Now(), 0)
		close(release)
		wantEq(t, "response", "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nGET /wait", cl.response("GET"))
		testwait.For(t, time.Second, "connection to the app closed", func() bool { return app.eofs.Load() == 1 })
		if n := e.h.up.Idle(); n != 0 {
			t.Errorf("%d pooled connections, want 0 once the pool is closed", n)
		}
	})
	t.Run("large heads", func(t *testing.T) {
		big := strings.Repeat("b", 20<<10)
		app := startScriptApp(t, func(c net.Conn, req *http.Request) {
			if req.URL.Path == "/big" {
				io.WriteString(c, "HTTP/1.1 200 OK\r\nX-Big: "+big+"\r\nContent-Length: 2\r\n\r\nOK")
				return
			}
			echoPath(c, req)
		})
		o := testEngineOptions()
		o.MaxHeaderBytes = 64 << 10
		e := startEngine(t, app.addr, o)
		cl := dial(t, e.addr)
		cl.send("GET /big HTTP/1.1\r\nHost: a\r\nX-Big: " + big + "\r\n\r\n")
		wantEq(t, "response", "HTTP/1.1 200 OK\r\nX-Big: "+big+"\r\nContent-Length: 2\r\n\r\nOK", cl.response("GET"))
		cl.send("GET /small HTTP/1.1\r\nHost: a\r\n\r\n")
		wantEq(t, "next response", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nGET /small", cl.response("GET"))
		if n := len(app.received()); n != 1 {
			t.Errorf("the app saw %d connections, want 1: the connection is reused after large heads", n)
		}
	})
}

// TestAnswerBeforeTheUploadEnds: an app that answers a POST at once, while
// the client is still sending its body: the client gets the answer, and
// neither connection carries another request (the app may read the rest of
// the body as one; the client's upload is cut).
func TestAnswerBeforeTheUploadEnds(t *testing.T) {
	app := rawApp(t, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nearly", false)
	e := startEngine(t, app, testEngineOptions())
	cl := dial(t, e.addr)
	cl.send("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nhello")
	got, closed := cl.rest(2 * time.Second)
	wantEq(t, "response", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nearly", got)
	if !closed {
		t.Error("the client's connection is still open")
	}
	testwait.For(t, time.Second, "request out of flight", func() bool { return e.h.inFlight.Load() == 0 })
	if n := e.h.up.Idle(); n != 0 {
		t.Errorf("%d pooled connections, want 0", n)
	}
}
