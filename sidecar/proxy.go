package sidecar

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	h1 "github.com/ebb-dev/ebb/internal/http1"
)

// counters are the per-pod request counters the scaler reads.
type counters struct {
	inFlight atomic.Int64
	total    atomic.Uint64
	on       bool
}

// proxy serves client connections: HTTP/1.1 with the engine of package
// internal/http1 (it is the engine's Handler), h2c by hand-off to the h2c
// server.
type proxy struct {
	opts           Options
	log            logr.Logger
	cnt            *counters
	up             *h1.Upstream
	srv            *h1.Server
	h2             *h2cServer
	upstreamErrors atomic.Uint64
	draining       atomic.Bool  // not ready: SIGTERM came
	quietFrom      atomic.Int64 // unix nanos: when closing began, or the last request since
	app            *appState
}

func newProxy(opts Options, log logr.Logger) *proxy {
	p := &proxy{
		opts: opts,
		log:  log,
		cnt:  &counters{on: opts.Counting},
		up:   h1.NewUpstream(opts.Upstream),
		app:  newAppState(opts),
	}
	p.h2 = newH2CServer(p)
	p.srv = h1.NewServer(h1.Options{
		Name:                  "ebb-sidecar",
		HeaderTimeout:         opts.HeaderTimeout,
		IdleTimeout:           opts.IdleTimeout,
		ResponseHeaderTimeout: opts.ResponseHeaderTimeout,
		MaxHeaderBytes:        opts.MaxHeaderBytes,
	}, p, p.h2.handOff, log)
	return p
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

// arrived notes a request for the quiet period of a drain; outside a drain
// it costs one atomic load.
func (p *proxy) arrived() {
	if p.srv.Draining() {
		p.quietFrom.Store(time.Now().UnixNano())
	}
}

// beginClosing makes responses close their connection, so that keep-alive
// clients reconnect (through the Service, to whoever serves it now), and
// starts the quiet period; true the first time.
func (p *proxy) beginClosing() bool {
	if !p.srv.CloseAfterResponses() {
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

// UpstreamError counts and logs an app that is not answering, or not in
// time (h1.Handler).
func (p *proxy) UpstreamError(_ *h1.Upstream, err error) string {
	p.upstreamErrors.Add(1)
	p.log.V(1).Info("the app is not answering", "upstream", p.opts.Upstream, "error", err.Error())
	return "ebb-sidecar: the app is not answering on its port (" + p.opts.Upstream + "): " + err.Error()
}
