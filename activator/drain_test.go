package activator

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/ebb-dev/ebb/activator/proxy"
	"github.com/ebb-dev/ebb/internal/routing"
)

// get sends one GET for hello.test to addr on a connection of its own and
// returns "<status> <body>", or the error.
func get(addr string) (string, error) {
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/", nil)
	if err != nil {
		return "", err
	}
	req.Host = "hello.test"
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return fmt.Sprintf("%d %s", resp.StatusCode, b), err
}

// While kube-proxy may still route to a terminating activator (a hand-off
// slice lists it, or connections keep coming), its data port accepts and
// serves new connections; once neither has been true for the drain delay
// it stops accepting, and it exits as soon as nothing is in flight. An
// activator that closed its port at SIGTERM refused them (issue 32: for
// 0.3–0.7 s, until kube-proxy caught up).
func TestDrainServesNewConnectionsWhileRouted(t *testing.T) {
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	t.Cleanup(app.Close)
	router := proxy.NewRouter(proxy.RouterOptions{})
	t.Cleanup(router.Close)
	key := routing.Key{Namespace: "shop", Name: "hello"}
	router.SetRoutes([]routing.Route[proxy.AppConfig]{{Key: key, Hosts: []string{"hello.test"}}}, nil)
	router.SetEndpoints(key, []proxy.Endpoint{{Addr: strings.TrimPrefix(app.URL, "http://"), Ready: true}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	data := proxy.NewServer(router, &http.Server{ReadHeaderTimeout: 10 * time.Second})
	t.Cleanup(func() { data.Close() })
	accepts := &acceptClock{Listener: ln}
	go data.Serve(accepts)

	var routed atomic.Bool
	routed.Store(true)
	const delay = 300 * time.Millisecond
	d := drain{log: logr.Discard(), data: data, accepts: accepts, routed: routed.Load, delay: delay, coldStart: time.Minute, timeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		d.run(time.Now())
		close(done)
	}()
	// Listed in a hand-off slice: new connections are served, for longer
	// than the delay.
	for i := range 6 {
		time.Sleep(100 * time.Millisecond)
		if got, err := get(addr); err != nil || got != "200 ok" {
			t.Fatalf("new connection %d during the drain, while listed: %q, %v; want 200 ok", i+1, got, err)
		}
	}
	// Out of the slices, and quiet: it stops accepting after the delay and
	// returns, nothing being in flight.
	routed.Store(false)
	unlisted := time.Now()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the drain did not end 5 s after the activator left the slices, with nothing in flight")
	}
	if took := time.Since(unlisted); took < delay {
		t.Errorf("stopped accepting %s after leaving the slices, before the delay (%s)", took.Round(time.Millisecond), delay)
	}
	if _, err := get(addr); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("a connection after the drain: %v, want refused", err)
	}
}

// Out of every hand-off slice but still sent connections (kube-proxy's
// lag), the data port accepts until none has come for the delay.
func TestDrainAcceptsUntilQuiet(t *testing.T) {
	router := proxy.NewRouter(proxy.RouterOptions{})
	t.Cleanup(router.Close)
	router.SetRoutes([]routing.Route[proxy.AppConfig]{{Key: routing.Key{Namespace: "shop", Name: "hello"}, Hosts: []string{"hello.test"}}}, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	data := proxy.NewServer(router, &http.Server{ReadHeaderTimeout: 10 * time.Second})
	t.Cleanup(func() { data.Close() })
	accepts := &acceptClock{Listener: ln}
	go data.Serve(accepts)
	const delay = 300 * time.Millisecond
	d := drain{log: logr.Discard(), data: data, accepts: accepts, routed: func() bool { return false }, delay: delay, coldStart: time.Minute, timeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		d.run(time.Now())
		close(done)
	}()
	for i := range 6 { // 200 ms apart: each within the delay of the last
		time.Sleep(200 * time.Millisecond)
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("connection %d, %d ms into the drain: %v", i+1, (i+1)*200, err)
		}
		c.Close()
	}
	last := time.Now()
	<-done
	if took := time.Since(last); took < delay {
		t.Errorf("stopped accepting %s after the last connection, before the delay (%s)", took.Round(time.Millisecond), delay)
	}
}
