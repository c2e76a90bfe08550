package http1

import (
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// smuggledBody is a body that reads as a whole response of its own: sent
// after a head that has no body by rule, it would be taken as the answer
// to the next request on the connection (another client's, behind a
// pooling proxy).
const smuggledBody = "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nforged"

// TestAnswerSendsNoBodyWhereNoneIsAllowed: the engine's own answers
// (Answer) carry no body and no Content-Length with a 204 or 304 (RFC
// 9110 section 6.4.1, RFC 9112 section 6.3), and no body to a HEAD,
// whatever body the caller gives: the next request on the connection gets
// its own response.
func TestAnswerSendsNoBodyWhereNoneIsAllowed(t *testing.T) {
	app := startScriptApp(t, echoPath)
	addr, h := startParkingEngine(t, app.addr)
	for _, tc := range []struct {
		method string
		code   int
		want   string
	}{
		{"GET", 204, "HTTP/1.1 204 No Content\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n"},
		{"GET", 304, "HTTP/1.1 304 Not Modified\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n"},
		{"HEAD", 200, "HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 44\r\n\r\n"},
		{"HEAD", 503, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 44\r\n\r\n"},
	} {
		cl := dial(t, addr)
		cl.send(tc.method + " / HTTP/1.1\r\nHost: a\r\n\r\n")
		go h.next(t).Resume(func(c *Conn, _ *Request) bool { return c.Answer(tc.code, "", smuggledBody) })
		wantEq(t, tc.method+" answered "+strconv.Itoa(tc.code), tc.want, cl.head())
		cl.send("GET /next HTTP/1.1\r\nHost: a\r\n\r\n")
		wantEq(t, "the next request after "+tc.method+" answered "+strconv.Itoa(tc.code), "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nGET /next", cl.head()+cl.bytes(9))
	}
}

// TestUpstreamFailureToHeadSendsNoBody: a HEAD whose app cannot be reached
// gets the engine's 502 head without its body, the connection kept: the
// next request on it gets its own response, not the 502's text.
func TestUpstreamFailureToHeadSendsNoBody(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	e := startEngine(t, dead, testEngineOptions())
	cl := dial(t, e.addr)
	cl.send("HEAD / HTTP/1.1\r\nHost: a\r\n\r\n")
	head := cl.head()
	if !strings.HasPrefix(head, "HTTP/1.1 502 Bad Gateway\r\n") || !strings.HasSuffix(head, "\r\n\r\n") || strings.Contains(head, "Connection: close") {
		t.Fatalf("HEAD got %q, want a 502 head alone, the connection kept", head)
	}
	cl.send("GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	if got := cl.head(); !strings.HasPrefix(got, "HTTP/1.1 502 Bad Gateway\r\n") {
		t.Errorf("the next request got %q, want its own 502", got)
	}
}

// head reads the next response head, byte by byte as it comes: nothing
// past it is read (response, through net/http's parser, reads ahead).
func (cl *client) head() string {
	cl.t.Helper()
	cl.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	for !strings.HasSuffix(b.String(), "\r\n\r\n") {
		line, err := cl.br.ReadString('\n')
		b.WriteString(line)
		if err != nil {
			cl.t.Fatalf("reading a response head: %v (got %q)", err, b.String())
		}
		if b.Len() == len(line) && !strings.HasPrefix(line, "HTTP/1.1 ") {
			cl.t.Fatalf("a response begins %q", line)
		}
	}
	return b.String()
}

// bytes reads the next n bytes.
func (cl *client) bytes(n int) string {
	cl.t.Helper()
	b := make([]byte, n)
	if _, err := io.ReadFull(cl.br, b); err != nil {
		cl.t.Fatalf("reading %d bytes: %v (got %q)", n, err, b)
	}
	return string(b)
}
