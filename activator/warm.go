package activator

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

	h1 "github.com/ebb-dev/ebb/internal/proxy"
)

// DataServer serves the activator's data port. Warm HTTP/1.1 requests (an
// app with a ready endpoint, an origin-form target without escapes, a Host
// header) are proxied by the hand-written engine of package internal/proxy,
// spread round robin over the app's ready endpoints, each endpoint with one
// keep-alive pool built once. Any other request (unknown host, an app
// without a ready endpoint, which is held, an unusual target) hands its
// connection, the request included, to an http.Server whose handler is the
// DataPlane, which serves that connection from then on; so do connections
// that open with the HTTP/2 preface (h2c, gRPC).
type DataServer struct {
	d        *DataPlane
	srv      *http.Server
	ln       *handOffListener
	engine   h1.Options
	draining atomic.Bool
	srvOnce  sync.Once

	mu       sync.Mutex
	stopping bool
	lns      map[net.Listener]struct{}
	live     map[*h1.Conn]bool // value: waiting for a request head
	wg       sync.WaitGroup
	stop     chan struct{}
}

// NewDataServer returns a DataServer for d. srv serves the connections
// handed off (its Handler defaults to d); its ReadHeaderTimeout,
// IdleTimeout and MaxHeaderBytes apply to warm connections too.
func NewDataServer(d *DataPlane, srv *http.Server) *DataServer {
	if srv.Handler == nil {
		srv.Handler = d
	}
	return &DataServer{
		d:   d,
		srv: srv,
		ln:  &handOffListener{ch: make(chan net.Conn), done: make(chan struct{})},
		engine: h1.Options{
			Name:           "ebb-activator",
			HeaderTimeout:  cmpOr(srv.ReadHeaderTimeout, 10*time.Second),
			IdleTimeout:    cmpOr(srv.IdleTimeout, 120*time.Second),
			MaxHeaderBytes: cmpOr(srv.MaxHeaderBytes, http.DefaultMaxHeaderBytes),
			KeepRaw:        true,
			Forwarded:      true, // as httputil.ProxyRequest.SetXForwarded on the net/http path
		},
		lns:  map[net.Listener]struct{}{},
		live: map[*h1.Conn]bool{},
		stop: make(chan struct{}),
	}
}

// Serve accepts connections on ln until Shutdown or Close; it then returns
// http.ErrServerClosed.
func (s *DataServer) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		ln.Close()
		return http.ErrServerClosed
	}
	s.lns[ln] = struct{}{}
	s.mu.Unlock()
	s.srvOnce.Do(func() {
		go s.srv.Serve(s.ln) // returns when ln closes
		go s.janitor()
	})
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
			s.d.opts.Log.Error(err, "accept failed, retrying", "in", backoff)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		tc, ok := c.(*net.TCPConn)
		if !ok {
			if !s.ln.handOff(c) {
				c.Close()
			}
			continue
		}
		s.wg.Add(1)
		go s.serveConn(tc)
	}
}

func (s *DataServer) serveConn(c *net.TCPConn) {
	defer s.wg.Done()
	cc := h1.NewConn(c, &s.engine, s)
	if !s.track(cc, true) {
		cc.Release()
		c.Close()
		return
	}
	var out net.Conn
	defer func() {
		if r := recover(); r != nil {
			s.d.opts.Log.Error(fmt.Errorf("panic: %v", r), "recovered serving a connection", "stack", string(debug.Stack()))
			out = nil
		}
		s.track(cc, false)
		cc.Release()
		if out == nil || !s.ln.handOff(out) {
			c.Close()
		}
	}()
	out = cc.Serve()
}

// ServeRequest proxies a warm request to one of its app's ready endpoints
// and hands any other off to the net/http server (h1.Handler). Warm
// requests are not held, so they are not counted as held.
func (s *DataServer) ServeRequest(cc *h1.Conn, rq *h1.Request) bool {
	host, target := cc.Host(), cc.Target()
	if len(host) == 0 || len(target) == 0 || target[0] != '/' {
		return cc.HandOff()
	}
	path := target
	for i, c := range target {
		if c == '?' {
			path = target[:i]
			break
		}
		if c == '%' { // net/http routes by the unescaped path
			return cc.HandOff()
		}
	}
	route, ok := s.d.table.Load().Lookup(string(host), string(path))
	if !ok {
		return cc.HandOff() // 404 naming the host
	}
	up := route.Value.pick()
	if up == nil {
		return cc.HandOff() // held
	}
	s.d.opts.Metrics.proxied.Inc()
	return cc.RoundTrip(up.pool, rq)
}

// SetIdle marks cc as waiting for a request head; false once the server
// stops (h1.Handler).
func (s *DataServer) SetIdle(cc *h1.Conn, idle bool) bool {
	s.mu.Lock()
	ok := !s.stopping
	if _, live := s.live[cc]; live {
		s.live[cc] = idle
	}
	s.mu.Unlock()
	return ok
}

// Draining reports whether responses close their connection (h1.Handler).
func (s *DataServer) Draining() bool { return s.draining.Load() }

// BadGateway logs an endpoint that failed (h1.Handler).
func (s *DataServer) BadGateway(up *h1.Upstream, err error) string {
	s.d.opts.Log.V(1).Info("upstream failed", "upstream", up.Addr(), "error", err.Error())
	return fmt.Sprintf("ebb-activator: upstream %s failed: %v", up.Addr(), err)
}

func (s *DataServer) track(cc *h1.Conn, add bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if add {
		if s.stopping {
			return false
		}
		s.live[cc] = false
		return true
	}
	delete(s.live, cc)
	return true
}

// janitor closes pooled upstream connections unused for a while.
func (s *DataServer) janitor() {
	t := time.NewTicker(h1.UpstreamIdleTimeout / 3)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case now := <-t.C:
			s.d.proxies.m.Range(func(_, v any) bool {
				v.(*upstream).pool.CloseIdle(now, h1.UpstreamIdleTimeout)
				return true
			})
		}
	}
}

// beginStop stops accepting, closes idle connections and makes busy ones
// close after their current response.
func (s *DataServer) beginStop() {
	s.draining.Store(true)
	s.mu.Lock()
	if !s.stopping {
		s.stopping = true
		close(s.stop)
	}
	for ln := range s.lns {
		ln.Close()
	}
	for cc, idle := range s.live {
		if idle {
			cc.NetConn().SetReadDeadline(time.Unix(1, 0))
		}
	}
	s.mu.Unlock()
}

// Shutdown stops accepting, waits (until ctx ends) for the requests in
// flight on the engine's connections, then shuts the net/http server down
// (http.Server.Shutdown). Held requests are the DataPlane's: call
// DataPlane.Shutdown after this.
func (s *DataServer) Shutdown(ctx context.Context) error {
	s.beginStop()
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		s.closeLive()
	}
	err := s.srv.Shutdown(ctx)
	s.ln.Close()
	return err
}

// Close closes every connection at once.
func (s *DataServer) Close() error {
	s.beginStop()
	s.closeLive()
	err := s.srv.Close()
	s.ln.Close()
	return err
}

func (s *DataServer) closeLive() {
	s.mu.Lock()
	for cc := range s.live {
		cc.NetConn().Close()
	}
	s.mu.Unlock()
}

// handOffListener is the net/http server's listener, fed by handOff.
type handOffListener struct {
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

// handOff gives a connection to the net/http server; false if it is closed.
func (l *handOffListener) handOff(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.done:
		return false
	}
}

func (l *handOffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *handOffListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *handOffListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }
