package connfeed

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"testing"
	"time"
)

// wait fails t unless ch yields within a second.
func wait[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(time.Second):
		t.Fatalf("%s: still blocked after 1 s", what)
		panic("unreachable")
	}
}

func TestFeedReachesAccept(t *testing.T) {
	l := New()
	defer l.Close()
	c, peer := net.Pipe()
	defer c.Close()
	defer peer.Close()
	fed := make(chan bool)
	go func() { fed <- l.Feed(c) }()
	got, err := l.Accept()
	if err != nil || got != c {
		t.Fatalf("Accept = %v, %v; want the connection fed", got, err)
	}
	if !wait(t, "Feed", fed) {
		t.Error("Feed = false for a connection Accept returned")
	}
}

func TestAcceptAfterClose(t *testing.T) {
	l := New()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if c, err := l.Accept(); !errors.Is(err, net.ErrClosed) || c != nil {
		t.Errorf("Accept after Close = %v, %v; want nil, net.ErrClosed", c, err)
	}
}

func TestCloseEndsAWaitingAccept(t *testing.T) {
	l := New()
	errc := make(chan error)
	go func() {
		_, err := l.Accept()
		errc <- err
	}()
	time.Sleep(10 * time.Millisecond) // let Accept wait
	l.Close()
	if err := wait(t, "Accept", errc); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept = %v, want net.ErrClosed", err)
	}
}

func TestFeedAfterCloseRefused(t *testing.T) {
	l := New()
	l.Close()
	c, peer := net.Pipe()
	defer peer.Close()
	defer c.Close()
	if l.Feed(c) {
		t.Fatal("Feed after Close = true")
	}
	// The connection is the caller's still: the listener did not close it.
	go peer.Write([]byte("x"))
	b := make([]byte, 1)
	c.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := c.Read(b); err != nil {
		t.Errorf("the refused connection no longer reads: %v", err)
	}
}

// A Feed waiting for an Accept that never comes is refused once the
// listener closes.
func TestCloseRefusesAWaitingFeed(t *testing.T) {
	l := New()
	c, peer := net.Pipe()
	defer c.Close()
	defer peer.Close()
	fed := make(chan bool)
	go func() { fed <- l.Feed(c) }()
	time.Sleep(10 * time.Millisecond) // let Feed wait
	l.Close()
	if wait(t, "Feed", fed) {
		t.Error("Feed = true, with no Accept and the listener closed")
	}
}

func TestAddr(t *testing.T) {
	a, ok := New().Addr().(*net.TCPAddr)
	if !ok || !a.IP.IsLoopback() || a.Port != 0 || a.Network() != "tcp" {
		t.Errorf("Addr = %#v, want a TCP loopback address", New().Addr())
	}
}

// A net/http server serves what is fed to it, and its Serve returns
// when the listener closes.
func TestServesAnHTTPServer(t *testing.T) {
	l := New()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("fed " + r.URL.Path))
	})}
	served := make(chan error)
	go func() { served <- srv.Serve(l) }()
	c, peer := net.Pipe()
	defer peer.Close()
	if !l.Feed(c) {
		t.Fatal("Feed = false")
	}
	go peer.Write([]byte("GET /x HTTP/1.1\r\nHost: a\r\n\r\n"))
	resp, err := http.ReadResponse(bufio.NewReader(peer), nil)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 16)
	n, _ := resp.Body.Read(b)
	if got := string(b[:n]); got != "fed /x" {
		t.Errorf("body %q, want %q", got, "fed /x")
	}
	l.Close()
	if err := wait(t, "Serve", served); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Serve = %v, want net.ErrClosed", err)
	}
	srv.Close()
}
