package http1

import (
	"bufio"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/ebb-dev/ebb/internal/testwait"
)

// Tunnels after a 101, on real sockets: when one side leaves, the tunnel
// ends within a bound, whatever the other side does; a live tunnel is
// never cut.

const switching = "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: x\r\n\r\n"

// tunnelApp answers every upgrade with a 101 and then runs fn on the
// connection (br holds what it read beyond the request head).
func tunnelApp(t *testing.T, fn func(c *net.TCPConn, br *bufio.Reader, done <-chan struct{})) string {
	t.Helper()
	return rawConnApp(t, func(c net.Conn, done <-chan struct{}) {
		defer c.Close()
		br := bufio.NewReader(c)
		if skipRequestHead(br) != nil {
			return
		}
		io.WriteString(c, switching)
		fn(c.(*net.TCPConn), br, done)
	})
}

// upgrade sends an upgrade request and reads the 101 head.
func upgrade(t *testing.T, addr string) *client {
	t.Helper()
	cl := dial(t, addr)
	cl.send("GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: x\r\n\r\n")
	cl.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	head := ""
	for !strings.HasSuffix(head, "\r\n\r\n") {
		line, err := cl.br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the 101: %v (got %q)", err, head)
		}
		head += line
	}
	wantEq(t, "101 head", switching, head)
	return cl
}

// appConnClosed reports, by writing to it twice, whether the engine closed
// its connection to the app (the second write meets the reset of the
// first).
func appConnClosed(c *net.TCPConn) bool {
	c.SetWriteDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("?")); err != nil {
		return true
	}
	time.Sleep(50 * time.Millisecond)
	_, err := c.Write([]byte("?"))
	return err != nil
}

// TestTunnelEndsWhenTheClientLeaves: the app answers 101 and then ignores
// the client's FIN (it never closes, never writes): the tunnel, its count
// and the app's connection end once the app has been silent for the
// half-close timeout after the FIN; a client's reset ends it at once
// (issue 34, found 3).
func TestTunnelEndsWhenTheClientLeaves(t *testing.T) {
	for _, reset := range []bool{false, true} {
		name := "FIN"
		if reset {
			name = "reset"
		}
		t.Run(name, func(t *testing.T) {
			closed := make(chan bool, 1)
			check := make(chan struct{})
			app := tunnelApp(t, func(c *net.TCPConn, br *bufio.Reader, done <-chan struct{}) {
				io.Copy(io.Discard, br) // the client's FIN comes through as EOF: ignored
				select {
				case <-check:
					closed <- appConnClosed(c)
				case <-done:
				}
			})
			o := testEngineOptions()
			o.HalfCloseTimeout = 300 * time.Millisecond
			e := startEngine(t, app, o)
			cl := upgrade(t, e.addr)
			testwait.For(t, time.Second, "tunnel in flight", func() bool { return e.h.inFlight.Load() == 1 })
			if reset {
				cl.c.(*net.TCPConn).SetLinger(0)
			}
			start := time.Now()
			cl.c.Close()
			testwait.For(t, 3*time.Second, "tunnel out of flight", func() bool { return e.h.inFlight.Load() == 0 })
			bound := o.HalfCloseTimeout + 3*clientCheck
			if reset {
				bound = 3 * clientCheck
			}
			if took := time.Since(start); took > bound {
				t.Errorf("left the in-flight count after %v, want within %v", took, bound)
			}
			testwait.For(t, time.Second, "client connection released", func() bool { return e.srv.OpenConns() == 0 })
			close(check)
			if !<-closed {
				t.Error("the connection to the app is still open")
			}
		})
	}
}

// TestTunnelEndsWhenTheAppLeaves: the app closes its side and the client
// never does: the tunnel ends once the client has been silent for the
// half-close timeout after the app's FIN, and the client sees its
// connection closed.
func TestTunnelEndsWhenTheAppLeaves(t *testing.T) {
	app := tunnelApp(t, func(c *net.TCPConn, br *bufio.Reader, done <-chan struct{}) {
		io.WriteString(c, "bye")
		c.CloseWrite()
		<-done
	})
	o := testEngineOptions()
	o.HalfCloseTimeout = 300 * time.Millisecond
	e := startEngine(t, app, o)
	cl := upgrade(t, e.addr)
	start := time.Now()
	got, closed := cl.rest(3 * time.Second) // the client reads, and never writes nor closes
	if !closed || got != "bye" {
		t.Errorf("client got %q (closed %v), want %q and its connection closed", got, closed, "bye")
	}
	testwait.For(t, time.Second, "tunnel out of flight", func() bool { return e.h.inFlight.Load() == 0 })
	if took := time.Since(start); took > o.HalfCloseTimeout+3*clientCheck {
		t.Errorf("tunnel ended after %v, want within %v", took, o.HalfCloseTimeout+3*clientCheck)
	}
}

// TestTunnelHalfClosedStaysWhileTheAppTalks: a client that half-closes
// and reads on gets every byte of an app that keeps sending, for longer
// than the half-close timeout (the timeout counts silence, not time), and
// then the app's close.
func TestTunnelHalfClosedStaysWhileTheAppTalks(t *testing.T) {
	app := tunnelApp(t, func(c *net.TCPConn, br *bufio.Reader, done <-chan struct{}) {
		io.Copy(io.Discard, br)
		for range 20 {
			time.Sleep(100 * time.Millisecond)
			io.WriteString(c, "x")
		}
	})
	o := testEngineOptions()
	o.HalfCloseTimeout = time.Second
	e := startEngine(t, app, o)
	cl := upgrade(t, e.addr)
	cl.send("hello")
	cl.c.(*net.TCPConn).CloseWrite()
	got, closed := cl.rest(5 * time.Second)
	if !closed || got != strings.Repeat("x", 20) {
		t.Errorf("client got %q (closed %v), want 20 x and the app's close", got, closed)
	}
}

// TestTunnelIdleTimeout: with Options.TunnelIdleTimeout, a tunnel in which
// no byte goes either way for that long is closed on both sides; one with
// a byte every third of it is not.
func TestTunnelIdleTimeout(t *testing.T) {
	app := tunnelApp(t, func(c *net.TCPConn, br *bufio.Reader, done <-chan struct{}) {
		io.Copy(c, br) // echo until the engine closes
	})
	o := testEngineOptions()
	o.TunnelIdleTimeout = 300 * time.Millisecond
	e := startEngine(t, app, o)

	start := time.Now() // the timeout runs from the 101, sent before upgrade returns
	idle := upgrade(t, e.addr)
	got, closed := idle.rest(3 * time.Second)
	if took := time.Since(start); !closed || got != "" || took < o.TunnelIdleTimeout || took > o.TunnelIdleTimeout+3*clientCheck {
		t.Errorf("an idle tunnel: got %q, closed %v after %v; want closed after about %v", got, closed, took, o.TunnelIdleTimeout)
	}

	live := upgrade(t, e.addr)
	for range 6 { // twice the idle timeout
		live.send("x")
		live.c.SetReadDeadline(time.Now().Add(time.Second))
		if b, err := live.br.ReadByte(); err != nil || b != 'x' {
			t.Fatalf("a live tunnel: echo %q, %v", b, err)
		}
		time.Sleep(o.TunnelIdleTimeout / 3)
	}
	live.send("y")
	live.c.SetReadDeadline(time.Now().Add(time.Second))
	if b, err := live.br.ReadByte(); err != nil || b != 'y' {
		t.Errorf("a live tunnel after twice the idle timeout: echo %q, %v", b, err)
	}
	live.c.Close()
	testwait.For(t, 2*time.Second, "tunnels out of flight", func() bool { return e.h.inFlight.Load() == 0 })
}

// TestTunnelEndsWhenTheClientLeavesAStalledWrite: the app answers 101 and
// then reads nothing, so the copy to it blocks once its buffers are full;
// the client that gave up and reset still ends the tunnel within the
// half-close timeout, though no read of either side wakes (review of issue
// 34, found 3 in another shape). A client that closes with a FIN instead
// cannot be seen by any proxy: its FIN waits in its own kernel behind the
// bytes the app does not take.
func TestTunnelEndsWhenTheClientLeavesAStalledWrite(t *testing.T) {
	for _, reset := range []bool{true} {
		t.Run("reset", func(t *testing.T) {
			app := tunnelApp(t, func(c *net.TCPConn, br *bufio.Reader, done <-chan struct{}) {
				<-done // never reads, never writes, never closes
			})
			o := testEngineOptions()
			o.HalfCloseTimeout = 300 * time.Millisecond
			e := startEngine(t, app, o)
			cl := upgrade(t, e.addr)
			big := make([]byte, 1<<20)
			cl.c.SetWriteDeadline(time.Now().Add(2 * time.Second))
			for total := 0; total < 256<<20; {
				n, err := cl.c.Write(big)
				total += n
				if err != nil {
					break // the app's and the engine's buffers are full
				}
			}
			if reset {
				cl.c.(*net.TCPConn).SetLinger(0)
			}
			start := time.Now()
			cl.c.Close()
			testwait.For(t, 4*time.Second, "tunnel out of flight", func() bool { return e.h.inFlight.Load() == 0 })
			if bound := o.HalfCloseTimeout + time.Second + 3*clientCheck; time.Since(start) > bound {
				t.Errorf("left the in-flight count after %v, want within %v", time.Since(start), bound)
			}
			testwait.For(t, time.Second, "client connection released", func() bool { return e.srv.OpenConns() == 0 })
		})
	}
}
