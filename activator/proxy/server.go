package proxy

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ebb-dev/ebb/internal/connfeed"
	h1 "github.com/ebb-dev/ebb/internal/http1"
	"github.com/ebb-dev/ebb/internal/staticanswer"
)

// Server serves the activator's data port. HTTP/1.1 requests with an
// origin-form target and a Host header are the engine's (package
// internal/http1): parsed once, proxied to the app's ready endpoints
// (round robin, each endpoint with one keep-alive pool built once) or,
// while the app has none, held in the engine (parking) and sent by it
// once one is ready. Any other request (unknown host, an unusual target)
// hands its connection, the request included, to an http.Server whose
// handler is the Router, which serves that connection from then on; so do
// connections that open with the HTTP/2 preface (h2c, gRPC).
type Server struct {
	router  *Router
	srv     *http.Server
	ln      *connfeed.Listener
	h1      *h1.Server
	srvOnce sync.Once
	stop    chan struct{}
	stopped sync.Once
	// stopping is set once Shutdown or Close began: a request that would
	// be handed to net/http is answered by the engine instead (net/http
	// drops a request it reads once srv.Shutdown began).
	stopping atomic.Bool
	// handed lists, by client address, the connections handed to net/http
	// with a request that net/http has not read yet; Shutdown waits until
	// it has before srv.Shutdown begins.
	handedMu sync.Mutex
	handed   map[string]struct{}
	handedCh chan struct{} // closed when handed empties, if someone waits
}

// NewServer returns a Server for d. srv serves the connections
// handed off (its Handler defaults to d); its ReadHeaderTimeout,
// IdleTimeout and MaxHeaderBytes apply to warm connections too.
func NewServer(router *Router, srv *http.Server) *Server {
	if srv.Handler == nil {
		srv.Handler = router
	}
	s := &Server{
		router: router,
		srv:    srv,
		ln:     connfeed.New(),
		stop:   make(chan struct{}),
		handed: map[string]struct{}{},
	}
	state := srv.ConnState
	srv.ConnState = func(c net.Conn, cs http.ConnState) {
		if cs != http.StateNew {
			s.read(c)
		}
		if state != nil {
			state(c, cs)
		}
	}
	s.h1 = h1.NewServer(h1.Options{
		Name:           "ebb-activator",
		HeaderTimeout:  cmp.Or(srv.ReadHeaderTimeout, 10*time.Second),
		IdleTimeout:    cmp.Or(srv.IdleTimeout, 120*time.Second),
		MaxHeaderBytes: cmp.Or(srv.MaxHeaderBytes, http.DefaultMaxHeaderBytes),
		// Each request gets its route's timeouts (Router.timeouts) or the
		// Router's. Forwarding headers: as on the net/http path
		// (http1.SetForwarded).
		KeepRaw: true,
	}, s, s.ln.Feed, router.opts.Log)
	return s
}

// Serve accepts connections on ln until Shutdown or Close; it then returns
// http.ErrServerClosed.
func (s *Server) Serve(ln net.Listener) error {
	s.srvOnce.Do(func() {
		go s.srv.Serve(s.ln) // returns when ln closes
		go s.janitor()
	})
	return s.h1.Serve(ln)
}

// ServeRequest proxies a request to one of its app's ready endpoints, or
// holds it in the engine while the app has none (Router.holdH1), and
// hands off to the net/http server (h1.Handler) what the engine does not
// route itself: a target not in origin form, no Host header, an unknown
// host (404 naming it). Warm requests are not held, so they are not
// counted as held.
func (s *Server) ServeRequest(cc *h1.Conn, rq *h1.Request) bool {
	host, target := cc.Host(), cc.Target()
	if len(host) == 0 || len(target) == 0 || target[0] != '/' {
		return s.handOff(cc, "")
	}
	path, ok := routedPath(target)
	if !ok {
		return s.handOff(cc, "") // net/http answers 400
	}
	route, ok := s.router.table.Load().Lookup(string(host), path)
	if !ok {
		return s.handOff(cc, notRouted(string(host), path)) // 404 naming the host
	}
	a := route.Value
	up := a.pick()
	if set := a.cfg.Load().Static; set != nil {
		if rule := set.MatchBytes(cc.Method(), target, func(name string) ([]byte, bool) {
			v, n := cc.Header(name)
			return v, n == 1
		}); rule != nil && (up == nil || rule.When == staticanswer.Always) {
			s.router.opts.Metrics.countStatic()
			return cc.AnswerWith(rule.Status, rule.AppendResponse)
		}
	}
	if up == nil || a.depsWait.Load() {
		return s.router.holdH1(cc, rq, a, nil)
	}
	s.router.opts.Metrics.proxied.Inc()
	cc.DelHeader(fallbackHop)
	cc.SetTimeouts(s.router.timeouts(a))
	keep := cc.RoundTrip(up.pool, rq)
	s.router.opts.Requests.ObserveH1(cc)
	return keep
}

// handOff gives cc's request to net/http; once the server is stopping, the
// engine answers it instead: notFound (404) if the request names no routed
// app, else 503 with Retry-After (a request that would be held or sent on
// to an app: the client retries elsewhere), each closing the connection.
// A request handed off before is counted until net/http has read it
// (ConnState), so that srv.Shutdown does not begin before.
func (s *Server) handOff(cc *h1.Conn, notFound string) bool {
	if !s.stopping.Load() {
		s.handedMu.Lock()
		s.handed[cc.NetConn().RemoteAddr().String()] = struct{}{}
		s.handedMu.Unlock()
		if !s.stopping.Load() {
			return cc.HandOff()
		}
		s.read(cc.NetConn())
	}
	if notFound != "" {
		s.router.opts.Metrics.notFound.Inc()
		return cc.Answer(http.StatusNotFound, "", notFound+"\n")
	}
	return cc.Answer(http.StatusServiceUnavailable, "Retry-After: "+s.router.retryAfter()+"\r\n", "ebb-activator: this activator is shutting down; retry\n")
}

// read notes that net/http has read the request of a connection handed
// off (or that it is not to be handed off).
func (s *Server) read(c net.Conn) {
	s.handedMu.Lock()
	defer s.handedMu.Unlock()
	k := c.RemoteAddr().String()
	if _, ok := s.handed[k]; !ok {
		return
	}
	delete(s.handed, k)
	if len(s.handed) == 0 && s.handedCh != nil {
		close(s.handedCh)
		s.handedCh = nil
	}
}

// waitHanded waits until net/http has read every request handed to it,
// or until ctx ends.
func (s *Server) waitHanded(ctx context.Context) {
	s.handedMu.Lock()
	if len(s.handed) == 0 {
		s.handedMu.Unlock()
		return
	}
	if s.handedCh == nil {
		s.handedCh = make(chan struct{})
	}
	ch := s.handedCh
	s.handedMu.Unlock()
	select {
	case <-ch:
	case <-ctx.Done():
	}
}

// routedPath is the path an origin-form target is routed by: as net/http
// has it (its URL.Path), unescaped; false if it does not unescape.
func routedPath(target []byte) (string, bool) {
	path := target
	escaped := false
	for i, c := range target {
		if c == '?' {
			path = target[:i]
			break
		}
		escaped = escaped || c == '%'
	}
	if !escaped {
		return string(path), true
	}
	p, err := url.PathUnescape(string(path))
	return p, err == nil
}

// UpstreamError logs an endpoint that failed (h1.Handler).
func (s *Server) UpstreamError(up *h1.Upstream, err error) string {
	s.router.opts.Log.V(1).Info("upstream failed", "upstream", up.Addr(), "error", err.Error())
	return fmt.Sprintf("ebb-activator: upstream %s failed: %v", up.Addr(), err)
}

// janitor closes pooled upstream connections unused for a while.
func (s *Server) janitor() {
	t := time.NewTicker(h1.UpstreamIdleTimeout / 3)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case now := <-t.C:
			s.router.upstreams.m.Range(func(_, v any) bool {
				v.(*upstream).pool.CloseIdle(now, h1.UpstreamIdleTimeout)
				return true
			})
		}
	}
}

// CloseAfterResponses begins an activator's drain: the data port keeps
// accepting (kube-proxy may still send it new connections), but every
// response closes its connection, so that keep-alive clients reconnect,
// to whoever serves the Service now. Shutdown ends the drain.
func (s *Server) CloseAfterResponses() {
	s.h1.CloseAfterResponses()
	s.srv.SetKeepAlivesEnabled(false)
}

func (s *Server) beginStop() {
	s.stopping.Store(true)
	s.stopped.Do(func() { close(s.stop) })
	s.h1.Stop()
}

// Shutdown stops accepting and waits until every request the data port
// took has been answered: the requests in flight on its connections
// (proxied, or held in a handler) and the Router's held and released
// ones (Router.Shutdown). When ctx ends first, the requests still held,
// or held from then on, are answered 503 with Retry-After at once
// (Router.stopHolding), and the
// connections left are cut answerGrace later. It returns ctx's error if
// it had to answer or cut anything.
func (s *Server) Shutdown(ctx context.Context) error {
	s.beginStop()
	held := make(chan error, 1)
	go func() { held <- s.router.Shutdown(ctx) }()
	// At ctx's end, stop holding whatever Router.Shutdown's look saw: a
	// request held after it returned (an h2c stream in its handler, a
	// request parked on a connection under way) is answered 503 then, not
	// once the connections are done (a long stream keeps srv.Shutdown
	// open until they are cut).
	stopHold := context.AfterFunc(ctx, func() { s.router.stopHolding(ctx.Err()) })
	defer stopHold()
	// The connections wait for the Router's 503s past ctx's end.
	cut, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(answerGrace, cancel) })
	defer stop()
	err := s.h1.Shutdown(cut)
	// Every hand-off has been taken by now (h1.Shutdown waited for the
	// engine's connections, the last hand-offs among them); net/http must
	// have read their requests before it begins to shut down.
	s.waitHanded(cut)
	if e := s.srv.Shutdown(cut); e != nil {
		s.srv.Close()
		if err == nil {
			err = e
		}
	}
	s.ln.Close()
	if e := <-held; err == nil {
		err = e
	}
	// A connection that ended after the Router's last look may have left a
	// request held or released: no connection is left to bring another.
	if e := s.router.Shutdown(ctx); err == nil {
		err = e
	}
	return err
}

// Close closes every connection at once.
func (s *Server) Close() error {
	s.beginStop()
	s.h1.Close()
	err := s.srv.Close()
	s.ln.Close()
	return err
}
