package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ebb-dev/ebb/internal/routing"
)

// slowApp answers "ok" after delay.
func slowApp(t *testing.T, delay time.Duration) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(delay)
		io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// drainRig is rigProtocols returning the data port's Server too, whose
// Shutdown is the activator's once it stops accepting.
func drainRig(t *testing.T, opts RouterOptions, h2c bool) (*Server, *Router, string) {
	t.Helper()
	rt := NewRouter(opts)
	rt.SetRoutes([]routing.Route[AppConfig]{{Key: shopHello, Hosts: []string{"hello.test"}}}, nil)
	srv := &http.Server{Handler: rt, ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 64 << 10}
	if h2c {
		srv.Protocols = new(http.Protocols)
		srv.Protocols.SetHTTP1(true)
		srv.Protocols.SetUnencryptedHTTP2(true)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ds := NewServer(rt, srv)
	go ds.Serve(ln)
	t.Cleanup(func() { ds.Close() })
	t.Cleanup(rt.Close)
	return ds, rt, "http://" + ln.Addr().String()
}

// rawResponse reads one response from c: its status, Retry-After and
// body, or the error that ended it ("EOF" for a cut connection).
func rawResponse(c net.Conn) string {
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return "error: " + err.Error()
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "error reading the body: " + err.Error()
	}
	ra := resp.Header.Get("Retry-After")
	if ra != "" {
		ra = " Retry-After: " + ra
	}
	return fmt.Sprintf("%d%s %s", resp.StatusCode, ra, b)
}

// Requests held when Shutdown begins and released while it runs (the app
// became ready) get the app's answer: Shutdown returns only once they
// have it, and closes none of their connections first. An activator that
// finished its drain as soon as it held nothing closed the connections
// it had just released (clients got EOF: the upgrade of issue 32).
func TestReleasedRequestsInFlightAtShutdownAreAnswered(t *testing.T) {
	const n = 100
	app := slowApp(t, 300*time.Millisecond)
	ds, rt, url := drainRig(t, RouterOptions{}, false)
	conns := make([]net.Conn, n)
	for i := range conns {
		conns[i] = dialRaw(t, url)
		io.WriteString(conns[i], "GET / HTTP/1.1\r\nHost: hello.test\r\n\r\n")
	}
	waitHeld(t, rt, n)

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	shutdown := make(chan time.Time, 1)
	go func() {
		ds.Shutdown(ctx)
		shutdown <- time.Now()
	}()
	time.Sleep(50 * time.Millisecond) // Shutdown waits for the held requests
	released := time.Now()
	rt.SetEndpoints(shopHello, []Endpoint{{Addr: app, Ready: true}})

	got := make([]string, n)
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Go(func() { got[i] = rawResponse(c) })
	}
	wg.Wait()
	want := make([]string, n)
	for i := range want {
		want[i] = "200 ok"
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("answers of the requests released during Shutdown (-want +got):\n%s", d)
	}
	select {
	case end := <-shutdown:
		if took := end.Sub(released); took < 300*time.Millisecond {
			t.Errorf("Shutdown returned %s after the release, before the app answered (300 ms)", took.Round(time.Millisecond))
		}
	case <-time.After(5 * time.Second):
		t.Error("Shutdown did not return 5 s after every released request was answered")
	}
}

// A request still held when Shutdown's context ends (the activator must
// exit before the app is ready or the request's cold-start timeout) is
// answered 503 with Retry-After, never a cut connection; HTTP/1.1 (held in
// the engine) and h2c (held in its handler) alike.
func TestHeldAtShutdownDeadlineGets503WithRetryAfter(t *testing.T) {
	t.Run("http1", func(t *testing.T) {
		ds, rt, url := drainRig(t, RouterOptions{}, false)
		c := dialRaw(t, url)
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: hello.test\r\n\r\n")
		waitHeld(t, rt, 1)
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		go ds.Shutdown(ctx)
		got := rawResponse(c)
		want := "503 Retry-After: 1 ebb-activator: this activator is shutting down and app shop/hello has no ready pod yet; retry\n"
		if got != want {
			t.Errorf("held request at Shutdown's deadline: got %q, want %q", got, want)
		}
		if took := time.Since(start); took < 200*time.Millisecond {
			t.Errorf("answered after %s, before Shutdown's deadline", took.Round(time.Millisecond))
		}
		if rt.Held() != 0 {
			t.Errorf("held %d after Shutdown", rt.Held())
		}
	})
	t.Run("h2c", func(t *testing.T) {
		ds, rt, url := drainRig(t, RouterOptions{ColdStartTimeout: 5 * time.Second}, true)
		tr := &http.Transport{Protocols: new(http.Protocols)}
		tr.Protocols.SetUnencryptedHTTP2(true)
		t.Cleanup(tr.CloseIdleConnections)
		type result struct {
			proto, got string
		}
		done := make(chan result, 1)
		go func() {
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
			req.Host = "hello.test"
			resp, err := (&http.Client{Transport: tr}).Do(req)
			if err != nil {
				done <- result{"", "error: " + err.Error()}
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			done <- result{resp.Proto, fmt.Sprintf("%d Retry-After: %s %s", resp.StatusCode, resp.Header.Get("Retry-After"), b)}
		}()
		waitHeld(t, rt, 1)
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		defer cancel()
		go ds.Shutdown(ctx)
		var res result
		select {
		case res = <-done:
		case <-time.After(3 * time.Second):
			t.Fatal("no answer 3 s after Shutdown's deadline")
		}
		want := result{"HTTP/2.0", "503 Retry-After: 1 ebb-activator: this activator is shutting down and app shop/hello has no ready pod yet; retry\n"}
		if res != want {
			t.Errorf("held h2c request at Shutdown's deadline: got %+v, want %+v", res, want)
		}
	})
}

// A request that would go to net/http but arrives while Server.Shutdown
// runs (here one for a host no AppRoute routes) gets its answer, the 404
// naming the host. It was handed to net/http, which read it after
// srv.Shutdown began and dropped it (conn.serve returns unanswered while
// shutting down): the client got a cut connection.
func TestHandedOffDuringShutdownIsAnswered(t *testing.T) {
	ds, _, url := drainRig(t, RouterOptions{}, false)
	ds.CloseAfterResponses() // the drain's first step, as drain.run does
	c := dialRaw(t, url)
	io.WriteString(c, "GET / HTTP/1.1\r\n") // a head under way: not idle, so Stop keeps it
	time.Sleep(50 * time.Millisecond)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	go ds.Shutdown(ctx)
	time.Sleep(100 * time.Millisecond)
	io.WriteString(c, "Host: nobody.test\r\n\r\n")
	got := rawResponse(c)
	if !strings.HasPrefix(got, "404 ") {
		t.Errorf("a request taken during Shutdown and handed to net/http: got %q, want its 404", got)
	}
}

// An h2c request held in its handler at Shutdown's deadline is answered
// 503 with Retry-After even when Router.Shutdown's first look found
// nothing held (it returned) while an engine connection kept h1.Shutdown
// busy (a slow warm request). It was cut: nothing stopped holding until
// srv.Shutdown had cut the h2c connection.
func TestH2CHeldAfterIdleFirstPassGets503(t *testing.T) {
	ds, dp, url := drainRig(t, RouterOptions{}, true)
	warmKey := routing.Key{Namespace: "shop", Name: "warm"}
	dp.SetRoutes([]routing.Route[AppConfig]{
		{Key: shopHello, Hosts: []string{"hello.test"}},
		{Key: warmKey, Hosts: []string{"warm.test"}},
	}, nil)
	dp.SetEndpoints(warmKey, []Endpoint{{Addr: slowApp(t, 4*time.Second), Ready: true}})

	ds.CloseAfterResponses() // the drain's first step, as drain.run does
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	t.Cleanup(tr.CloseIdleConnections)
	cl := &http.Client{Transport: tr}
	// An h2c connection opened during the drain's accept phase, busy with
	// a slow warm stream (so that keep-alives being off does not close it).
	go func() {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Host = "warm.test"
		if resp, err := cl.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	// A slow warm request through the engine keeps h1.Shutdown waiting.
	w := dialRaw(t, url)
	io.WriteString(w, "GET / HTTP/1.1\r\nHost: warm.test\r\n\r\n")
	time.Sleep(50 * time.Millisecond)

	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	go ds.Shutdown(ctx)
	time.Sleep(100 * time.Millisecond) // Router.Shutdown's first pass: idle, returned

	done := make(chan string, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Host = "hello.test"
		resp, err := cl.Do(req)
		if err != nil {
			done <- "error: " + err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		done <- fmt.Sprintf("%d Retry-After: %s %s", resp.StatusCode, resp.Header.Get("Retry-After"), b)
	}()
	waitHeld(t, dp, 1)
	got := <-done
	want := "503 Retry-After: 1 ebb-activator: this activator is shutting down and app shop/hello has no ready pod yet; retry\n"
	if got != want {
		t.Errorf("h2c request held at Shutdown's deadline: got %q after %s, want %q", got, time.Since(start).Round(time.Millisecond), want)
	}
}

// A request parked in the engine after Router.Shutdown's first look
// returned is answered 503 with Retry-After at Shutdown's deadline. It was
// answered only once srv.Shutdown returned (a long h2c stream kept it
// open until the deadline + answerGrace).
func TestParkedAfterIdleFirstPassAnsweredAtDeadline(t *testing.T) {
	ds, dp, url := drainRig(t, RouterOptions{}, true)
	warmKey := routing.Key{Namespace: "shop", Name: "warm"}
	dp.SetRoutes([]routing.Route[AppConfig]{
		{Key: shopHello, Hosts: []string{"hello.test"}},
		{Key: warmKey, Hosts: []string{"warm.test"}},
	}, nil)
	dp.SetEndpoints(warmKey, []Endpoint{{Addr: slowApp(t, 4*time.Second), Ready: true}})
	ds.CloseAfterResponses()
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	t.Cleanup(tr.CloseIdleConnections)
	go func() { // a long h2c stream: srv.Shutdown waits for it
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Host = "warm.test"
		if resp, err := (&http.Client{Transport: tr}).Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	c := dialRaw(t, url)
	io.WriteString(c, "GET / HTTP/1.1\r\n") // a head under way
	time.Sleep(50 * time.Millisecond)
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	go ds.Shutdown(ctx)
	time.Sleep(100 * time.Millisecond) // Router.Shutdown's first pass: idle, returned
	io.WriteString(c, "Host: hello.test\r\n\r\n")
	waitHeld(t, dp, 1)
	got := rawResponse(c)
	took := time.Since(start)
	if !strings.HasPrefix(got, "503 Retry-After: 1 ") || took > 1500*time.Millisecond {
		t.Errorf("parked at Shutdown's deadline (500ms): got %q after %s", got, took.Round(time.Millisecond))
	}
}
