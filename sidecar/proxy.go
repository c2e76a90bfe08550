package sidecar

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	h1 "github.com/ebb-dev/ebb/internal/proxy"
)

// counters are the per-pod request counters the scaler reads.
type counters struct {
	inFlight atomic.Int64
	total    atomic.Uint64
	on       bool
}

// proxy serves client connections: HTTP/1.1 with the engine of package
// internal/proxy (it is the engine's Handler), h2c by hand-off to the h2c
// server.
type proxy struct {
	opts           Options
	engine         h1.Options
	log            logr.Logger
	cnt            *counters
	up             *h1.Upstream
	h2             *h2cServer
	upstreamErrors atomic.Uint64
	openConns      atomic.Int64
	draining       atomic.Bool  // not ready: SIGTERM came
	closing        atomic.Bool  // responses close their connection: preStop or SIGTERM came
	quietFrom      atomic.Int64 // unix nanos: when closing began, or the last request since
	readyAt        atomic.Int64 // unix nanos of the last successful readiness dial

	mu       sync.Mutex
	stopping bool
	live     map[*h1.Conn]bool // value: waiting for a request head
	wg       sync.WaitGroup
}

func newProxy(opts Options, log logr.Logger) *proxy {
	p := &proxy{
		opts: opts,
		engine: h1.Options{
			Name:           "ebb-sidecar",
			HeaderTimeout:  opts.HeaderTimeout,
			IdleTimeout:    opts.IdleTimeout,
			MaxHeaderBytes: opts.MaxHeaderBytes,
		},
		log:  log,
		cnt:  &counters{on: opts.Counting},
		up:   h1.NewUpstream(opts.Upstream),
		live: make(map[*h1.Conn]bool),
	}
	p.h2 = newH2CServer(p)
	return p
}

// serve accepts connections until ln is closed.
func (p *proxy) serve(ln *net.TCPListener) error {
	var backoff time.Duration
	for {
		c, err := ln.AcceptTCP()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			// Out of file descriptors and the like: wait and go on, as
			// net/http does.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			p.log.Error(err, "accept failed, retrying", "in", backoff)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		p.wg.Add(1)
		go p.serveConn(c)
	}
}

func (p *proxy) serveConn(c *net.TCPConn) {
	defer p.wg.Done()
	cc := h1.NewConn(c, &p.engine, p)
	if !p.track(cc, true) {
		cc.Release()
		c.Close()
		return
	}
	var h2 net.Conn
	defer func() {
		if r := recover(); r != nil {
			p.log.Error(fmt.Errorf("panic: %v", r), "recovered serving a connection", "stack", string(debug.Stack()))
			h2 = nil
		}
		p.track(cc, false)
		cc.Release()
		if h2 == nil || !p.h2.handOff(h2) {
			c.Close()
		}
	}()
	h2 = cc.Serve()
}

// ServeRequest counts and proxies one request (h1.Handler).
func (p *proxy) ServeRequest(cc *h1.Conn, rq *h1.Request) bool {
	p.arrived()
	if p.cnt.on && !rq.Probe() {
		p.cnt.inFlight.Add(1)
		p.cnt.total.Add(1)
		defer p.cnt.inFlight.Add(-1)
	}
	return cc.RoundTrip(p.up, rq)
}

// Draining reports whether responses close their connection (h1.Handler).
func (p *proxy) Draining() bool { return p.closing.Load() }

// arrived notes a request for the quiet period of a drain; outside a drain
// it costs one atomic load.
func (p *proxy) arrived() {
	if p.closing.Load() {
		p.quietFrom.Store(time.Now().UnixNano())
	}
}

// beginClosing makes responses close their connection, so that keep-alive
// clients reconnect (through the Service, to whoever serves it now), and
// starts the quiet period; true the first time.
func (p *proxy) beginClosing() bool {
	if !p.closing.CompareAndSwap(false, true) {
		return false
	}
	p.quietFrom.Store(time.Now().UnixNano())
	return true
}

// waitQuiet waits, after beginClosing, until nothing is in flight and no
// request has arrived for delay; false if ctx ends or deadline passes first.
func (p *proxy) waitQuiet(ctx context.Context, delay time.Duration, deadline time.Time) bool {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		now := time.Now()
		if p.cnt.inFlight.Load() == 0 && now.UnixNano()-p.quietFrom.Load() >= int64(delay) {
			return true
		}
		if now.After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
}

// BadGateway counts and logs an app that is not answering (h1.Handler).
func (p *proxy) BadGateway(_ *h1.Upstream, err error) string {
	p.upstreamErrors.Add(1)
	p.log.V(1).Info("the app is not answering", "upstream", p.opts.Upstream, "error", err.Error())
	return "ebb-sidecar: the app is not answering on its port (" + p.opts.Upstream + "): " + err.Error()
}

// track adds or removes a live connection; it refuses new ones once the
// proxy stops.
func (p *proxy) track(cc *h1.Conn, add bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if add {
		if p.stopping {
			return false
		}
		p.live[cc] = false
		p.openConns.Add(1)
		return true
	}
	delete(p.live, cc)
	p.openConns.Add(-1)
	return true
}

// SetIdle marks a connection as waiting for a request (or not); it returns
// false once the proxy stops, and the connection should close
// (h1.Handler).
func (p *proxy) SetIdle(cc *h1.Conn, idle bool) bool {
	p.mu.Lock()
	ok := !p.stopping
	if _, live := p.live[cc]; live {
		p.live[cc] = idle
	}
	p.mu.Unlock()
	return ok
}

// stop makes every connection close once its current request is done, and
// idle ones at once.
func (p *proxy) stop() {
	p.mu.Lock()
	p.stopping = true
	for cc, idle := range p.live {
		if idle {
			cc.NetConn().SetReadDeadline(time.Unix(1, 0))
		}
	}
	p.mu.Unlock()
}

// closeAll cuts every connection still open.
func (p *proxy) closeAll() {
	p.mu.Lock()
	for cc := range p.live {
		cc.NetConn().Close()
	}
	p.mu.Unlock()
}

// waitConns waits until every connection goroutine has returned, or until
// the deadline; it reports whether they all returned.
func (p *proxy) waitConns(deadline time.Time) bool {
	done := make(chan struct{})
	go func() {
		p.wg.Wait()
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
