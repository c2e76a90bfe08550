// Package connfeed is a net.Listener fed by hand: a net/http server serves
// connections that another reader accepted and then handed over with Feed
// (the HTTP/1.1 engine passes on an h2c connection in the sidecar, a cold
// or upgraded request in the activator). Close refuses every later Feed and
// ends every Accept, so the server's Serve returns.
package connfeed

import (
	"net"
	"sync"
)

// Listener is a net.Listener whose connections come from Feed. Its zero
// value is not usable: make one with New.
type Listener struct {
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

// New returns an open Listener.
func New() *Listener {
	return &Listener{ch: make(chan net.Conn), done: make(chan struct{})}
}

// Feed hands c to a caller of Accept, waiting for one; false, and c left to
// the caller, if the listener is or becomes closed first.
func (l *Listener) Feed(c net.Conn) bool {
	select {
	case <-l.done: // closed: refuse even if an Accept is still waiting
		return false
	default:
	}
	select {
	case l.ch <- c:
		return true
	case <-l.done:
		return false
	}
}

// Accept returns the next connection fed, or net.ErrClosed once the
// listener is closed.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case <-l.done:
		return nil, net.ErrClosed
	default:
	}
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close closes the listener (not the connections fed through it); later
// calls do nothing.
func (l *Listener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

// Addr is a loopback address: the connections fed have their own.
func (l *Listener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }
