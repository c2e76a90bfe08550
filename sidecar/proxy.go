package sidecar

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	h1 "github.com/ebb-dev/ebb/internal/http1"
	"github.com/ebb-dev/ebb/internal/reqmetrics"
	"github.com/ebb-dev/ebb/internal/staticanswer"
	"github.com/ebb-dev/ebb/internal/tracing"
)

// instanceLabel is groupsuffix.MetricLabel, which the sidecar does not
// import (it links apimachinery); a test keeps them equal.
const instanceLabel = "ebb_instance"

// counters are the per-pod request counters the scaler reads.
type counters struct {
	inFlight atomic.Int64
	total    atomic.Uint64
	// busySince is when inFlight last went from 0 to 1 (unix nanos): how
	// long the app has been serving without a break, which bounds the age
	// of the oldest request in flight (exact for one long-lived one, such
	// as a WebSocket).
	busySince atomic.Int64
	on        bool
}

// begin counts a request that arrived at now.
func (c *counters) begin(now time.Time) {
	if c.inFlight.Add(1) == 1 {
		c.busySince.Store(now.UnixNano())
	}
	c.total.Add(1)
}

// busyFor is how long requests have been in flight without a break; 0
// when none is.
func (c *counters) busyFor(now time.Time) time.Duration {
	since := c.busySince.Load()
	if c.inFlight.Load() == 0 || since == 0 {
		return 0
	}
	return max(0, time.Duration(now.UnixNano()-since))
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
	reg            *prometheus.Registry  // served on /metrics
	metrics        prometheus.Registerer // reg, with the ebb_instance label
	rec            *reqmetrics.Recorder  // nil: request metrics off
	tracer         trace.Tracer          // nil: tracing off
	ctl            *controls             // nil: no route control set
}

func newProxy(opts Options, log logr.Logger, tracer trace.Tracer) *proxy {
	p := &proxy{
		opts:   opts,
		log:    log,
		cnt:    &counters{on: opts.Counting},
		up:     h1.NewUpstream(opts.Upstream),
		app:    newAppState(opts),
		reg:    prometheus.NewRegistry(),
		tracer: tracer,
		ctl:    newControls(opts),
	}
	var reg prometheus.Registerer = p.reg
	if opts.Instance != "" {
		reg = prometheus.WrapRegistererWith(prometheus.Labels{instanceLabel: opts.Instance}, p.reg)
	}
	p.metrics = reg
	if opts.RequestMetrics {
		p.rec = reqmetrics.New(reg, reqmetrics.Sidecar)
	}
	p.h2 = newH2CServer(p)
	p.srv = h1.NewServer(h1.Options{
		Name:                  "ebb-sidecar",
		HeaderTimeout:         opts.HeaderTimeout,
		IdleTimeout:           opts.IdleTimeout,
		ResponseHeaderTimeout: opts.ResponseHeaderTimeout,
		TunnelIdleTimeout:     opts.StreamIdleTimeout,
		MaxHeaderBytes:        opts.MaxHeaderBytes,
	}, p, p.h2.handOff, log)
	return p
}

// ServeRequest counts and proxies one request (h1.Handler).
func (p *proxy) ServeRequest(cc *h1.Conn, rq *h1.Request) bool {
	p.arrived()
	if p.ctl != nil {
		return p.serveControlled(cc, rq)
	}
	if p.cnt.on {
		p.cnt.begin(cc.Began())
		defer p.cnt.inFlight.Add(-1)
	}
	return p.forward(cc, rq)
}

// serveControlled serves one request under the route controls: a static
// answer, or the request counted (unless an AtZero rule exempts it: a
// probe's, without a body or an upgrade), through the concurrency limit
// and within the request timeout.
func (p *proxy) serveControlled(cc *h1.Conn, rq *h1.Request) bool {
	c := p.ctl
	head := time.Now()
	exempt := false
	if c.static != nil {
		if r := c.static.MatchBytes(cc.Method(), originForm(cc.Target()), func(name string) ([]byte, bool) {
			v, n := cc.Header(name)
			return v, n == 1
		}); r != nil {
			if r.When == staticanswer.Always {
				c.countAnswer(r)
				return cc.AnswerWith(r.Status, r.AppendResponse)
			}
			exempt = r.Exempts() && probeShaped(cc)
		}
	}
	switch {
	case exempt:
		c.exempt.Add(1)
		defer c.exempt.Add(-1)
	case p.cnt.on:
		p.cnt.begin(cc.Began())
		defer p.cnt.inFlight.Add(-1)
	}
	var deadline time.Time
	if c.timeout > 0 {
		deadline = head.Add(c.timeout)
	}
	if c.lim != nil {
		switch c.lim.acquire(func(ready <-chan struct{}) bool { return waitH1(cc, ready, deadline) }) {
		case queueFull:
			return cc.Answer(http.StatusServiceUnavailable, "Retry-After: 1\r\n", c.lim.queueFullBody())
		case gaveUp:
			if !deadline.IsZero() && !time.Now().Before(deadline) && !cc.ClientGone() {
				return cc.Answer(http.StatusGatewayTimeout, "", timeoutBody(c.timeout))
			}
			cc.NetConn().Close()
			return false
		}
		defer c.lim.release()
	}
	if !deadline.IsZero() {
		// What is left of it after the queue.
		cc.SetTimeouts(h1.Timeouts{Request: max(time.Until(deadline), time.Nanosecond)})
	}
	return p.forward(cc, rq)
}

// probeShaped reports whether a request has no body and asks for no
// upgrade, as a probe's: the only requests an AtZero rule leaves out of
// the counts, so that no upload or tunnel reaches the app uncounted. It
// reads the head for the app, whose framing and Connection fields are the
// engine's own, from what it parsed: Transfer-Encoding only for a chunked
// body, Content-Length as parsed, Connection and Upgrade only for an
// upgrade.
func probeShaped(cc *h1.Conn) bool {
	for _, name := range [...]string{"transfer-encoding", "connection", "upgrade"} {
		if _, n := cc.Header(name); n > 0 {
			return false
		}
	}
	v, n := cc.Header("content-length")
	return n == 0 || string(v) == "0"
}

// originForm is the path and query of an absolute-form target
// ("http://host/path?query" → "/path?query"), as net/http reads it and the
// activator matches it; any other target as it is (a static rule's match
// then decides: only an absolute path in canonical form can match).
func originForm(t []byte) []byte {
	if len(t) == 0 || t[0] == '/' {
		return t
	}
	i := bytes.Index(t, []byte("://"))
	if i < 0 {
		return t
	}
	scheme := t[:i]
	if !bytes.EqualFold(scheme, []byte("http")) && !bytes.EqualFold(scheme, []byte("https")) {
		return t
	}
	rest := t[i+3:]
	j := bytes.IndexAny(rest, "/?#")
	if j < 0 || rest[j] != '/' {
		return t
	}
	return rest[j:]
}

// waitH1 waits for ready while the client is there and deadline (if any)
// has not passed, checking every clientCheck.
func waitH1(cc *h1.Conn, ready <-chan struct{}, deadline time.Time) bool {
	t := time.NewTimer(clientCheck)
	defer t.Stop()
	for {
		select {
		case <-ready:
			return true
		case now := <-t.C:
			if cc.ClientGone() || (!deadline.IsZero() && !now.Before(deadline)) {
				return false
			}
			next := clientCheck
			if !deadline.IsZero() {
				next = min(next, deadline.Sub(now))
			}
			t.Reset(next)
		}
	}
}

// clientCheck is how often a queued request checks that its client is
// still there (the engine checks as often while a request waits on the
// app).
const clientCheck = 100 * time.Millisecond

// forward proxies one request to the app.
func (p *proxy) forward(cc *h1.Conn, rq *h1.Request) bool {
	if p.tracer != nil {
		return p.serveTraced(cc, rq)
	}
	keep := cc.RoundTrip(p.up, rq)
	p.rec.ObserveH1(cc)
	return keep
}

// serveTraced proxies one request in a span of its own, continuing the
// trace of the request's traceparent (when it has exactly one, and a
// valid one), and hands the app the sidecar's span as its parent when the
// span is sampled.
func (p *proxy) serveTraced(cc *h1.Conn, rq *h1.Request) bool {
	ctx := context.Background()
	if tp, n := cc.TraceParent(); n == 1 {
		ctx = tracing.Propagator.Extract(ctx, tracing.Bytes(tp))
		if !trace.SpanContextFromContext(ctx).IsValid() {
			n = 2 // not a traceparent: leave the request as it is
		}
	} else if n > 1 {
		keep := cc.RoundTrip(p.up, rq)
		p.rec.ObserveH1(cc)
		return keep
	}
	_, span := p.tracer.Start(ctx, "ebb-sidecar", trace.WithTimestamp(cc.Began()), trace.WithSpanKind(trace.SpanKindServer))
	if sc := span.SpanContext(); sc.IsSampled() {
		var b [tracing.TraceParentLen]byte
		cc.SetTraceParent(tracing.TraceParent(b[:0], sc))
	}
	keep := cc.RoundTrip(p.up, rq)
	p.rec.ObserveH1(cc)
	if span.IsRecording() {
		span.SetAttributes(attribute.Int("http.response.status_code", cc.Status()), attribute.String("server.address", string(cc.Host())))
		if cc.Status() >= 500 || cc.Status() == 0 {
			span.SetStatus(codes.Error, "")
		}
	}
	span.End()
	return keep
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
		if p.busy() == 0 && now.UnixNano()-p.quietFrom.Load() >= int64(delay) {
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

// busy is how many requests are at the app or queued for it: the counted
// ones and those an AtZero static response left out of the counts.
func (p *proxy) busy() int64 {
	n := p.cnt.inFlight.Load()
	if p.ctl != nil {
		n += p.ctl.exempt.Load()
	}
	return n
}

// UpstreamError counts and logs an app that is not answering, or not in
// time (h1.Handler).
func (p *proxy) UpstreamError(_ *h1.Upstream, err error) string {
	p.upstreamErrors.Add(1)
	var te *h1.ResponseTimeoutError
	if p.ctl != nil && p.ctl.timeout > 0 && errors.As(err, &te) && te.After != p.opts.ResponseHeaderTimeout {
		// The request timeout's remainder, not the response-header timeout.
		p.log.V(1).Info("the app did not answer within the request timeout", "upstream", p.opts.Upstream, "timeout", p.ctl.timeout.String())
		return strings.TrimSuffix(timeoutBody(p.ctl.timeout), "\n")
	}
	p.log.V(1).Info("the app is not answering", "upstream", p.opts.Upstream, "error", err.Error())
	return "ebb-sidecar: the app is not answering on its port (" + p.opts.Upstream + "): " + err.Error()
}
