package proxy

import (
	"bufio"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestFallbackLeadingBackToAnActivatorDoesNotLoop: a fallback whose
// ClusterIP leads back to an activator (another ebb app at zero, its
// hand-off slice) routes the request to the same app again. With the
// queue full, the request went to the fallback, came back, found the
// queue full, went to the fallback again, at once and without end (a
// connection and goroutines per hop). It now goes there once: back at an
// activator it carries the hop header and gets the 503 it would get
// without a fallback; on net/http's path (h2c) too.
func TestFallbackLeadingBackToAnActivatorDoesNotLoop(t *testing.T) {
	rt, url, _ := rigProtocols(t, RouterOptions{ColdStartTimeout: 5 * time.Second}, AppConfig{QueueSize: 1}, true)
	self := strings.TrimPrefix(url, "http://")
	rt.SetRoutes(routesWith(AppConfig{QueueSize: 1, ColdStartTimeout: 5 * time.Second, Fallback: self}), nil)
	first := dialRaw(t, url)
	io.WriteString(first, "GET /a HTTP/1.1\r\nHost: hello.test\r\n\r\n")
	waitHeld(t, rt, 1)
	before := runtime.NumGoroutine()
	c := dialRaw(t, url)
	io.WriteString(c, "GET /b HTTP/1.1\r\nHost: hello.test\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	got := readRaw(t, bufio.NewReader(c), false)
	if got.Code != http.StatusServiceUnavailable || got.Header.Get("Retry-After") == "" || !strings.Contains(got.Body, "hold queue of app shop/hello is full") {
		t.Errorf("got %d %v %q, want the 503 with Retry-After of a full queue", got.Code, got.Header, got.Body)
	}
	if after := runtime.NumGoroutine(); after-before > 20 {
		t.Errorf("goroutines %d -> %d for one request: the fallback loops back into the activator", before, after)
	}

	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, url+"/h2", nil)
	req.Host = "hello.test"
	client := h2cClient(t)
	client.Timeout = 2 * time.Second
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("net/http path: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(b), "hold queue of app shop/hello is full") {
		t.Errorf("net/http path: got %d %v %q, want the 503 with Retry-After of a full queue", resp.StatusCode, resp.Header, b)
	}
}

// TestFallbackHopHeader: a request sent to a fallback carries
// Ebb-Fallback-Hop. One a client sends is held and counted as any other
// (it exempts it from nothing), goes to the app without the header once
// the app is ready, and at the cold-start timeout gets the 504, not the
// fallback.
func TestFallbackHopHeader(t *testing.T) {
	fb := newRawApp(t)
	rt, url, rec := rig(t, RouterOptions{}, AppConfig{ColdStartTimeout: 100 * time.Millisecond, Fallback: fb.addr})
	c := dialRaw(t, url)
	io.WriteString(c, "GET /timeout HTTP/1.1\r\nHost: hello.test\r\n\r\n")
	if got := readAnswers(t, c, 1); got[0] != (answer{200, "ok"}) {
		t.Errorf("got %+v, want the fallback's 200 ok", got[0])
	}
	if seen := fb.next(t); !strings.Contains(seen, "\r\nEbb-Fallback-Hop: 1\r\n") {
		t.Errorf("the fallback got %q, without the hop header", seen)
	}

	c = dialRaw(t, url)
	io.WriteString(c, "GET /forged HTTP/1.1\r\nHost: hello.test\r\nebb-fallback-hop: 1\r\n\r\n")
	got := readRaw(t, bufio.NewReader(c), false)
	if got.Code != http.StatusGatewayTimeout {
		t.Errorf("a request with the hop header at its cold-start timeout got %d %q, want 504", got.Code, got.Body)
	}
	select {
	case seen := <-fb.ch:
		t.Errorf("a request with the hop header went to the fallback: %q", seen)
	default:
	}
	if v := rec.values(); len(v) < 4 || v[2] != 1 {
		t.Errorf("pushes %v: the request with the hop header was not held", v)
	}

	app := newRawApp(t)
	rt.SetRoutes(routesWith(AppConfig{ColdStartTimeout: 5 * time.Second, Fallback: fb.addr}), nil)
	c = dialRaw(t, url)
	io.WriteString(c, "GET /held HTTP/1.1\r\nHost: hello.test\r\nEbb-Fallback-Hop: 1\r\nEbb-Fallback-Hop: 2\r\n\r\n")
	waitHeld(t, rt, 1)
	rt.SetEndpoints(shopHello, []Endpoint{{Addr: app.addr, Ready: true}})
	if got := readAnswers(t, c, 1); got[0] != (answer{200, "ok"}) {
		t.Errorf("got %+v, want the app's 200 ok", got[0])
	}
	if seen := app.next(t); !strings.HasPrefix(seen, "GET /held ") || strings.Contains(strings.ToLower(seen), "ebb-fallback-hop") {
		t.Errorf("the app got %q, want the request without the hop header", seen)
	}
	c = dialRaw(t, url)
	io.WriteString(c, "GET /warm HTTP/1.1\r\nHost: hello.test\r\nEbb-Fallback-Hop: 1\r\n\r\n")
	readAnswers(t, c, 1)
	if seen := app.next(t); !strings.HasPrefix(seen, "GET /warm ") || strings.Contains(strings.ToLower(seen), "ebb-fallback-hop") {
		t.Errorf("the app got %q, want the request without the hop header", seen)
	}
}
