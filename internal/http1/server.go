package http1

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
)

// Server serves client connections with the engine. It owns what every
// component would otherwise write for itself: the accept loop (with
// net/http's back-off on errors), panic recovery, connection tracking and
// the drain; the component supplies its Handler, and where connections the
// engine gives away go (HandOff).
type Server struct {
	opts    Options
	h       Handler
	handOff func(net.Conn) bool
	log     logr.Logger

	closing atomic.Bool // responses close their connection
	open    atomic.Int64

	mu       sync.Mutex
	stopping bool
	lns      map[net.Listener]struct{}
	live     map[*Conn]bool // value: waiting for a request head
	wg       sync.WaitGroup
}

// NewServer returns a server of h with the engine options o. handOff takes
// the connections the engine gives away — the h2c preface, Conn.HandOff,
// and any that is not TCP — and reports whether it took them (nil: they
// are closed).
func NewServer(o Options, h Handler, handOff func(net.Conn) bool, log logr.Logger) *Server {
	if handOff == nil {
		handOff = func(net.Conn) bool { return false }
	}
	return &Server{opts: o, h: h, handOff: handOff, log: log, lns: map[net.Listener]struct{}{}, live: map[*Conn]bool{}}
}

// Serve accepts connections on ln until Stop, Shutdown or Close, and then
// returns http.ErrServerClosed; it returns any other error of ln as is.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		ln.Close()
		return http.ErrServerClosed
	}
	s.lns[ln] = struct{}{}
	s.mu.Unlock()
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			stopping := s.stopping
			s.mu.Unlock()
			if stopping {
				return http.ErrServerClosed
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			// Out of file descriptors and the like: wait and go on, as
			// net/http does.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.log.Error(err, "accept failed, retrying", "in", backoff)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		tc, ok := c.(*net.TCPConn)
		if !ok {
			if !s.handOff(c) {
				c.Close()
			}
			continue
		}
		s.wg.Add(1)
		go s.serveConn(tc)
	}
}

func (s *Server) serveConn(c *net.TCPConn) {
	defer s.wg.Done()
	cc := newConn(c, s)
	if !s.track(cc, true) {
		cc.release()
		c.Close()
		return
	}
	s.run(cc, cc.Serve)
}

// run serves tracked connection cc with serve, recovering a panic; then
// it parks cc (Conn.Park), hands the connection serve returned off, or
// closes it.
func (s *Server) run(cc *Conn, serve func() net.Conn) {
	var out net.Conn
	defer func() {
		if r := recover(); r != nil {
			s.log.Error(fmt.Errorf("panic: %v", r), "recovered serving a connection", "stack", string(debug.Stack()))
			out = nil
			cc.parkThen = nil
			if up := cc.upstream.Load(); up != nil {
				up.Close()
			}
			cc.abortBody() // its goroutine reads cc.br: done before release
		}
		s.track(cc, false)
		if then := cc.parkThen; then != nil {
			cc.parkThen = nil
			then(cc.park())
			return
		}
		cc.release()
		if out == nil || !s.handOff(out) {
			cc.c.Close()
		}
	}()
	out = serve()
}

func (s *Server) track(cc *Conn, add bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if add {
		if s.stopping {
			return false
		}
		s.live[cc] = false
		s.open.Add(1)
		return true
	}
	delete(s.live, cc)
	s.open.Add(-1)
	return true
}

// setIdle marks a connection as waiting for a request head (or not); false
// once the server stops, and the connection should close.
func (s *Server) setIdle(cc *Conn, idle bool) bool {
	s.mu.Lock()
	ok := !s.stopping
	if _, live := s.live[cc]; live {
		s.live[cc] = idle
	}
	s.mu.Unlock()
	return ok
}

// OpenConns is the number of client connections the engine serves now.
func (s *Server) OpenConns() int64 { return s.open.Load() }

// CloseAfterResponses makes every response close its connection, so that
// keep-alive clients reconnect (to whoever serves the Service now); true
// the first time.
func (s *Server) CloseAfterResponses() bool { return s.closing.CompareAndSwap(false, true) }

// Draining reports whether responses close their connection.
func (s *Server) Draining() bool { return s.closing.Load() }

// Stop stops accepting (its listeners close), closes idle connections at
// once and makes busy ones close after their current response.
func (s *Server) Stop() {
	s.closing.Store(true)
	s.mu.Lock()
	s.stopping = true
	for ln := range s.lns {
		ln.Close()
	}
	for cc, idle := range s.live {
		if idle {
			cc.c.SetReadDeadline(time.Unix(1, 0))
		}
	}
	s.mu.Unlock()
}

// Shutdown stops the server and waits for its connections to finish; when
// ctx ends first it cuts them and returns ctx's error.
func (s *Server) Shutdown(ctx context.Context) error {
	s.Stop()
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.Close()
		return ctx.Err()
	}
}

// Close stops the server and cuts every connection at once.
func (s *Server) Close() {
	s.Stop()
	s.mu.Lock()
	for cc := range s.live {
		cc.c.Close()
		if up := cc.upstream.Load(); up != nil {
			up.Close()
		}
	}
	s.mu.Unlock()
}

// Wait waits until every connection goroutine has returned, or until
// deadline; it reports whether they all returned.
func (s *Server) Wait(deadline time.Time) bool {
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}
