package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	h1 "github.com/ebb-dev/ebb/internal/http1"
	"github.com/ebb-dev/ebb/internal/tcptest"
)

// TestRequestTimeoutRacingTheHead: an app whose whole response comes just
// as the route's request timeout passes gets either its answer through or
// a 504 — never a connection closed with nothing said. The engine read the
// head in time, then found the deadline past before writing it, and
// returned without answering (seen behind a sidecar whose own 504 came a
// moment after the activator's deadline).
func TestRequestTimeoutRacingTheHead(t *testing.T) {
	const timeout = 20 * time.Millisecond
	rt, url, _ := rig(t, RouterOptions{}, AppConfig{Timeouts: h1.Timeouts{Request: timeout}})
	app := func(delay time.Duration) string {
		return tcptest.Serve(t, func(c net.Conn) {
			br := bufio.NewReader(c)
			if _, err := http.ReadRequest(br); err != nil {
				return
			}
			time.Sleep(delay)
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			io.Copy(io.Discard, c)
		})
	}
	var ok, timedOut int
	for i := range 300 {
		// Delays spread around the timeout, 50 µs apart.
		delay := timeout - 2*time.Millisecond + time.Duration(i%80)*50*time.Microsecond
		rt.SetEndpoints(shopHello, []Endpoint{{Addr: app(delay), Ready: true}})
		c := dialRaw(t, url)
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: hello.test\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("request %d (app answers after %v, timeout %v): %v, want its 200 or a 504", i, delay, timeout, err)
		}
		body, err := io.ReadAll(resp.Body)
		switch {
		case resp.StatusCode == http.StatusOK && err == nil && string(body) == "ok":
			ok++
		case resp.StatusCode == http.StatusGatewayTimeout:
			timedOut++
		default:
			t.Fatalf("request %d: %d %q %v, want its 200 or a 504", i, resp.StatusCode, body, err)
		}
		c.Close()
	}
	t.Logf("%d answered, %d timed out", ok, timedOut)
}
