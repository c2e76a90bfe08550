package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ebb-dev/ebb/internal/tcptest"
)

// hostileAdmin is a pod's admin port answering every request head with
// answer, on raw TCP.
func hostileAdmin(t *testing.T, answer func(c net.Conn)) string {
	t.Helper()
	return tcptest.Serve(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			if line == "\r\n" {
				answer(c)
			}
		}
	})
}

// TestProbeReadyHostilePod: the activator's /ready probe of a pod's sidecar
// is not ready, within its 500 ms, for an answer that is not a 200 on its
// own: a redirect is not followed (a pod cannot make the activator request
// another address), and an endless head or no answer costs the bound only.
func TestProbeReadyHostilePod(t *testing.T) {
	var followed atomic.Bool
	elsewhere := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { followed.Store(true) }))
	defer elsewhere.Close()
	d := NewRouter(RouterOptions{})
	for name, answer := range map[string]func(c net.Conn){
		"redirect": func(c net.Conn) {
			io.WriteString(c, "HTTP/1.1 302 Found\r\nLocation: "+elsewhere.URL+"/ready\r\nContent-Length: 0\r\n\r\n")
		},
		"endless head": func(c net.Conn) {
			io.WriteString(c, "HTTP/1.1 200 OK\r\n")
			for {
				if _, err := io.WriteString(c, "X-Pad: "+strings.Repeat("x", 1000)+"\r\n"); err != nil {
					return
				}
			}
		},
		"never": func(net.Conn) {},
		"one byte a second": func(c net.Conn) {
			for _, b := range []byte("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n") {
				if _, err := c.Write([]byte{b}); err != nil {
					return
				}
				time.Sleep(time.Second)
			}
		},
	} {
		addr := hostileAdmin(t, answer)
		start := time.Now()
		ready := d.probeReady(addr)
		took := time.Since(start)
		if ready {
			t.Errorf("%s: ready", name)
		}
		if took > 700*time.Millisecond {
			t.Errorf("%s: the probe took %s", name, took)
		}
	}
	if followed.Load() {
		t.Error("the probe followed the pod's redirect")
	}
	ok := hostileAdmin(t, func(c net.Conn) { io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nready\n") })
	if !d.probeReady(ok) {
		t.Error("a sidecar answering 200: not ready")
	}
}
