package proxy

import (
	"bufio"
	"io"
	"net/http"
	"testing"
	"time"
)

// TestPlaceholderPageRefusesWhatBreaksFraming: NewPage refuses a page
// that would break the framing of the connection it is answered on: a
// status with no body by rule (its body, such as "HTTP/1.1 200 OK…", was
// read as the next response on a pooled ingress connection), a framing
// or hop-by-hop header, a header name that is not a token, a value with
// CR or LF. An AppRoute written by hand is not held to the RoutePolicy's
// rules by admission alone.
func TestPlaceholderPageRefusesWhatBreaksFraming(t *testing.T) {
	const smuggled = "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nforged"
	for _, tc := range []struct {
		name   string
		status int
		fields [][2]string
	}{
		{"204", 204, nil},
		{"304", 304, nil},
		{"100", 100, nil},
		{"101", 101, nil},
		{"600", 600, nil},
		{"Transfer-Encoding", 200, [][2]string{{"Transfer-Encoding", "chunked"}}},
		{"Content-Length", 200, [][2]string{{"content-length", "6"}}},
		{"Connection", 503, [][2]string{{"Connection", "close"}}},
		{"Upgrade", 503, [][2]string{{"Upgrade", "websocket"}}},
		{"name with CRLF", 503, [][2]string{{"X-A\r\nContent-Length", "6"}}},
		{"value with CRLF", 503, [][2]string{{"X-A", "1\r\nContent-Length: 6"}}},
		{"value with LF", 503, [][2]string{{"X-A", "1\nX-B: 2"}}},
	} {
		if p, err := NewPage(tc.status, tc.fields, smuggled); err == nil || p != nil {
			t.Errorf("%s: NewPage(%d, %q) = %v, %v; want it refused", tc.name, tc.status, tc.fields, p, err)
		}
	}
	if _, err := NewPage(503, [][2]string{{"Refresh", "2"}, {"Cache-Control", "no-store"}}, "<p>waking</p>"); err != nil {
		t.Errorf("a page with Refresh and Cache-Control refused: %v", err)
	}
}

// TestHeadWhoseFallbackFailsGetsNoBody: a held HEAD whose fallback cannot
// be reached gets the 504 of its cold-start timeout as a head alone, on a
// connection kept open: the answer's body went out after the head, and
// was read as the response to the next request on the connection.
func TestHeadWhoseFallbackFailsGetsNoBody(t *testing.T) {
	_, url, _ := rig(t, RouterOptions{ColdStartTimeout: 100 * time.Millisecond}, AppConfig{Fallback: deadAddr(t)})
	c := dialRaw(t, url)
	br := bufio.NewReader(c)
	io.WriteString(c, "HEAD / HTTP/1.1\r\nHost: hello.test\r\n\r\n")
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodHead})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusGatewayTimeout || resp.Close {
		t.Fatalf("HEAD got %d (close %v), want 504 on a connection kept open", resp.StatusCode, resp.Close)
	}
	io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: other.test\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if line, _ := br.ReadString('\n'); line != "HTTP/1.1 404 Not Found\r\n" {
		t.Errorf("the next response on the connection begins %q, want the 404 of the next request", line)
	}
}
