package http1

import (
	"bufio"
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func parseHead(raw string, maxHeader int) (*Conn, Request, int, error) {
	return parseHeadWith(raw, Options{Name: "ebb-test", MaxHeaderBytes: maxHeader})
}

func parseHeadWith(raw string, o Options) (*Conn, Request, int, error) {
	cc := &Conn{o: &o, br: bufio.NewReaderSize(strings.NewReader(raw), clientBufSize), ip: []byte("10.0.0.9")}
	code, err := cc.readRequest()
	return cc, cc.req.rq, code, err
}

func TestReadRequestRewritesHead(t *testing.T) {
	cc, rq, _, err := parseHead("\r\nPOST /p?q=1 HTTP/1.1\r\nHost: h\r\nconnection: Upgrade, close\r\nUpgrade: websocket\r\n"+
		"Content-Length: 3\r\nUser-Agent: kube-probe/1.30\r\nKeep-Alive: 5\r\n\r\nabc", 4096)
	if err != nil {
		t.Fatal(err)
	}
	want := "POST /p?q=1 HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nUser-Agent: kube-probe/1.30\r\n" +
		"Content-Length: 3\r\nX-Forwarded-For: 10.0.0.9\r\nConnection: Upgrade\r\n\r\n"
	if diff := cmp.Diff(want, string(cc.out)); diff != "" {
		t.Errorf("head for the app (-want +got):\n%s", diff)
	}
	wantRq := Request{host: true, upgrade: true, hasUpgrade: true, closeAfter: true, cl: 3}
	if diff := cmp.Diff(wantRq, rq, cmp.AllowUnexported(Request{})); diff != "" {
		t.Errorf("request (-want +got):\n%s", diff)
	}
}

func TestReadRequestLongLines(t *testing.T) {
	// A header line longer than the read buffer is fine within the limit.
	long := strings.Repeat("c", 3*clientBufSize)
	cc, _, _, err := parseHead("GET / HTTP/1.1\r\nHost: h\r\nCookie: "+long+"\r\n\r\n", 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(cc.out, []byte("Cookie: "+long+"\r\n")) {
		t.Error("long header line not forwarded whole")
	}
	if _, _, code, _ := parseHead("GET / HTTP/1.1\r\nHost: h\r\nCookie: "+long+"\r\n\r\n", 8<<10); code != 431 {
		t.Errorf("over the limit: code %d, want 431", code)
	}
}

func TestFramingChunked(t *testing.T) {
	tests := []struct {
		in      string
		n       int // bytes that belong to the body; -1 for an error
		done    bool
		comment string
	}{
		{"5\r\nhello\r\n0\r\n\r\nNEXT", 15, true, "simple, followed by the next message"},
		{"5;ext=1\r\nhello\r\n0\r\nX-T: 1\r\n\r\n", 29, true, "extension and trailer"},
		{"A\r\n0123456789\r\n0\r\n\r\n", 20, true, "upper-case hex"},
		{"5\nhello\r\n0\r\n\r\n", -1, false, "bare LF after the size"},
		{"5\r\nhello\n0\r\n\r\n", -1, false, "bare LF after the data"},
		{"5\r\nhello\r\n0\r\n\n", -1, false, "bare LF ending the body"},
		{"5\r\nhello\r\n0\r\nX-T: 1\n\r\n", -1, false, "bare LF after a trailer"},
		{"5 x\r\nhello\r\n0\r\n\r\n", -1, false, "garbage after the size"},
		{"5\rx\nhello\r\n0\r\n\r\n", -1, false, "CR not followed by LF"},
		{"5;a\rb\r\nhello\r\n0\r\n\r\n", -1, false, "CR inside an extension"},
		{"5;a\x00\r\nhello\r\n0\r\n\r\n", -1, false, "NUL inside an extension"},
		{"5 \t\r\nhello\r\n0\r\n\r\n", 17, true, "white space after the size (as net/http)"},
		{"5 ;a\r\nhello\r\n0\r\n\r\n", -1, false, "white space before an extension (net/http refuses it)"},
		{"5\r\nhello\r\n0\r\nX-T 1\r\n\r\n", -1, false, "trailer line without a colon"},
		{"5\r\nhello\r\n0\r\nX T: 1\r\n\r\n", -1, false, "trailer name not a token"},
		{"5\r\nhello\r\n0\r\nX-T: 1\r\n folded\r\n\r\n", -1, false, "obs-fold in a trailer"},
		{"5\r\nhello\r\n0\r\nX-T: a\x01b\r\n\r\n", -1, false, "control byte in a trailer value"},
		{"\r\n", -1, false, "no size"},
		{"5\r\nhel", 6, false, "incomplete"},
		{"zz\r\n", -1, false, "not hex"},
		{"5\r\nhelloXX", -1, false, "data longer than announced"},
		{"fffffffffffffffff\r\n", -1, false, "size overflow"},
		{"1000000000000000\r\n", -1, false, "16 significant digits"},
		{"0000000000000003\r\nabc\r\n0\r\n\r\n", 28, true, "leading zeros, 16 digits in all (as net/http)"},
		{"00000000000000003\r\nabc\r\n0\r\n\r\n", -1, false, "17 digits, leading zeros included (net/http refuses them)"},
	}
	for _, tt := range tests {
		// Whole, and cut at every position: the result must not depend on
		// how the bytes arrive.
		for cut := 0; cut <= len(tt.in); cut++ {
			var f framing
			f.reset(bodyChunked, 0)
			n1, err := f.consume([]byte(tt.in[:cut]))
			n := n1
			if err == nil && !f.done() {
				var n2 int
				n2, err = f.consume([]byte(tt.in[n1:]))
				n += n2
			}
			if tt.n < 0 {
				if err == nil {
					t.Errorf("%s (cut %d): no error", tt.comment, cut)
				}
				continue
			}
			if err != nil || n != tt.n || f.done() != tt.done {
				t.Errorf("%s (cut %d): n=%d done=%v err=%v, want n=%d done=%v", tt.comment, cut, n, f.done(), err, tt.n, tt.done)
			}
		}
	}
}

// FuzzReadRequest: no input crashes the parser, and an accepted head goes
// to the app as exactly one well-delimited head.
func FuzzReadRequest(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close, x-a\r\nX-A: 1\r\n\r\n",
		"GET / HTTP/1.0\r\nX-Forwarded-For: 1.1.1.1\r\n\r\n",
		"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		cc, _, code, err := parseHead(string(b), 4096)
		if err != nil {
			if code != 0 && (code < 400 || code > 599) {
				t.Fatalf("error %v with status %d", err, code)
			}
			return
		}
		out := cc.out
		if i := bytes.Index(out, []byte("\r\n\r\n")); i != len(out)-4 {
			t.Fatalf("head for the app is not one head: %q", out)
		}
		for i, c := range out {
			if c == '\r' && (i+1 >= len(out) || out[i+1] != '\n') || c == '\n' && (i == 0 || out[i-1] != '\r') {
				t.Fatalf("bare CR or LF at %d in %q", i, out)
			}
		}
	})
}

// TestReadRequestKeepRawAndForwarded: the head as received is kept for a
// hand-off, and the client's forwarding headers pass as received, but
// X-Forwarded-For, which gets the client's address (forwarded.go).
func TestReadRequestKeepRawAndForwarded(t *testing.T) {
	raw := "GET /a%20b?x HTTP/1.1\nHost: h.test\r\nForwarded: for=1.2.3.4\r\nX-Forwarded-Host: evil\r\nX-Forwarded-Proto: https\r\nConnection: keep-alive\r\n\r\nNEXT"
	cc, _, _, err := parseHeadWith(raw, Options{Name: "ebb-test", MaxHeaderBytes: 4096, KeepRaw: true})
	if err != nil {
		t.Fatal(err)
	}
	wantOut := "GET /a%20b?x HTTP/1.1\r\nHost: h.test\r\nForwarded: for=1.2.3.4\r\nX-Forwarded-Host: evil\r\nX-Forwarded-Proto: https\r\nX-Forwarded-For: 10.0.0.9\r\n\r\n"
	if diff := cmp.Diff(wantOut, string(cc.out)); diff != "" {
		t.Errorf("head for the upstream (-want +got):\n%s", diff)
	}
	// The head as received (line endings made CRLF), for a hand-off.
	wantRaw := "GET /a%20b?x HTTP/1.1\r\nHost: h.test\r\nForwarded: for=1.2.3.4\r\nX-Forwarded-Host: evil\r\nX-Forwarded-Proto: https\r\nConnection: keep-alive\r\n\r\n"
	if diff := cmp.Diff(wantRaw, string(cc.req.raw)); diff != "" {
		t.Errorf("raw head (-want +got):\n%s", diff)
	}
	if got := string(cc.Host()) + " " + string(cc.Target()); got != "h.test /a%20b?x" {
		t.Errorf("host and target: %q", got)
	}
}

// TestReadRequestRefusals pins the status and message of every refusal of
// a request head, each from the part of the parser that makes it.
func TestReadRequestRefusals(t *testing.T) {
	tests := []struct {
		raw  string
		code int
		msg  string
	}{
		{"\r\n\r\n\r\n\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n", 400, "empty request line"},
		{"GET /HTTP/1.1\r\nHost: h\r\n\r\n", 400, "malformed request line"},
		{" GET / HTTP/1.1\r\nHost: h\r\n\r\n", 400, "malformed request line"},
		{"GET  / HTTP/1.1\r\nHost: h\r\n\r\n", 400, "malformed request line"},
		{"G(T / HTTP/1.1\r\nHost: h\r\n\r\n", 400, "malformed request line"},
		{"GET / HTTP/1.10\r\nHost: h\r\n\r\n", 400, "malformed request line"},
		{"GET / HTTP/2.0\r\nHost: h\r\n\r\n", 505, "HTTP version not supported"},
		{"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 0, "h2c prior knowledge"},
		{"CONNECT h:443 HTTP/1.1\r\nHost: h\r\n\r\n", 405, "CONNECT is not supported by ebb-test"},
		{"GET /a%zz HTTP/1.1\r\nHost: h\r\n\r\n", 400, "malformed request target"},
		{"GET / HTTP/1.1\r\nHost: h\r\nX: a\r\n b\r\n\r\n", 400, "obsolete line folding in header"},
		{"GET / HTTP/1.1\r\nHost: h\r\nX y: a\r\n\r\n", 400, "malformed header line"},
		{"GET / HTTP/1.1\r\nHost: h\r\n: a\r\n\r\n", 400, "malformed header line"},
		{"GET / HTTP/1.1\r\nHost: h\r\nX: a\x01b\r\n\r\n", 400, "control character in a header value"},
		{"GET / HTTP/1.1\r\nHost: h\r\nContent_Length: 0\r\n\r\n", 400, "a framing header spelt with _"},
		{"GET / HTTP/1.1\r\nHost: h\r\nHost: h\r\n\r\n", 400, "more than one Host header"},
		{"GET / HTTP/1.1\r\nHost: h/x\r\n\r\n", 400, "malformed Host header"},
		{"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 01\r\n\r\nx", 400, "invalid Content-Length"},
		{"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 400, "more than one Transfer-Encoding header"},
		{"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\n\r\n", 501, "unsupported Transfer-Encoding (only chunked is)"},
		{"GET / HTTP/1.1\r\n\r\n", 400, "missing Host header"},
		{"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nContent-Length: 1\r\n\r\n", 400, "both Content-Length and Transfer-Encoding"},
		{"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400, "Transfer-Encoding in an HTTP/1.0 request"},
		{"GET / HTTP/1.1\r\nHost: h\r\nX: " + strings.Repeat("x", 200) + "\r\n\r\n", 431, "request head too large"},
		{"GET / HTTP/1.1\r\nHost: h\r\n", 0, "EOF"},
	}
	for _, tt := range tests {
		_, _, code, err := parseHead(tt.raw, 128)
		if err == nil {
			t.Errorf("%q: accepted", tt.raw)
			continue
		}
		if code != tt.code || err.Error() != tt.msg {
			t.Errorf("%q: %d %q, want %d %q", tt.raw, code, err, tt.code, tt.msg)
		}
	}
}
