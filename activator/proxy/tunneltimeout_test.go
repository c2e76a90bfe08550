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

// upgradeEchoApp answers every request 101 and then echoes what comes.
func upgradeEchoApp(t *testing.T) string {
	t.Helper()
	return tcptest.Serve(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		io.Copy(c, br)
	})
}

// TestRequestTimeoutSparesTunnels: a route's request timeout bounds a
// request until its response ends, but not the tunnel after a 101, which
// only the stream idle timeout bounds: on the engine's path, and on
// net/http's (a target in absolute form), where the timeout cut the tunnel.
func TestRequestTimeoutSparesTunnels(t *testing.T) {
	rt, url, _ := rig(t, RouterOptions{}, AppConfig{Timeouts: h1.Timeouts{Request: 200 * time.Millisecond}})
	rt.SetEndpoints(shopHello, []Endpoint{{Addr: upgradeEchoApp(t), Ready: true}})
	for path, target := range map[string]string{"engine": "/ws", "net/http": "http://hello.test/ws"} {
		c := dialRaw(t, url)
		br := bufio.NewReader(c)
		io.WriteString(c, "GET "+target+" HTTP/1.1\r\nHost: hello.test\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodGet})
		if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("%s: got %v %v, want 101", path, resp, err)
		}
		time.Sleep(400 * time.Millisecond) // twice the request timeout
		io.WriteString(c, "ping")
		b := make([]byte, 4)
		if _, err := io.ReadFull(br, b); err != nil || string(b) != "ping" {
			t.Errorf("%s: the tunnel past the request timeout echoed %q, %v; want ping", path, b, err)
		}
		c.Close()
	}
}
