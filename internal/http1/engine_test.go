package http1

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
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

func TestAppClosesPooledConnection(t *testing.T) {
	// The pooled connection is dead at the next request: a GET is sent
	// again on a fresh one.
	e := startEngine(t, rawApp(t, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n", true), testEngineOptions())
	cl := dial(t, e.addr)
	for range 5 {
		cl.send("GET / HTTP/1.1\r\nHost: a\r\n\r\n")
		wantEq(t, "response", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n", cl.response("GET"))
		time.Sleep(10 * time.Millisecond)
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
