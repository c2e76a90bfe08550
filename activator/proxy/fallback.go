package proxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httputil"
	"sync"
	"sync/atomic"
	"time"

	h1 "github.com/ebb-dev/ebb/internal/http1"
	"github.com/ebb-dev/ebb/internal/reqmetrics"
)

// A route's fallback (AppConfig.Fallback) takes the held requests its app
// cannot serve: at the cold-start timeout, and when the app's hold queue,
// its fair share or the activator's caps are full. The request was held,
// not forwarded, so it is sent whole, as received, to the fallback
// Service's ClusterIP (no DNS): the client gets the fallback's answer as
// the fallback gave it, no header of ebb's added. When the fallback
// cannot be reached, or fails before its answer's head, the client gets
// what it would have got without one (504, or 503 with Retry-After), and
// the failure is logged. A request to an activator that is shutting down
// is not sent there: it is answered 503 so that it is retried.
//
// A fallback may lead back to an activator (another ebb app at zero, its
// Service's hand-off slice; a Service without a selector), which would
// route the request to this app again, hold or refuse it, and send it to
// the fallback again, without end. So a request sent to a fallback
// carries FallbackHopHeader, and a request that arrives carrying it, from
// anywhere, is never sent to a fallback: it gets the answer it would get
// without one. The header goes to no app (every forward drops it), and
// one a client sends only costs its own request the fallback: it is held
// and counted as any other. The name is fixed, not the instance's: a
// loop through another ebb instance's activator is cut too.

// FallbackHopHeader marks a request an activator sent to a fallback.
const FallbackHopHeader = "Ebb-Fallback-Hop"

// fallbackHop is FallbackHopHeader in lower case, for the engine.
const fallbackHop = "ebb-fallback-hop"

// fallbackH1 sends rq, out of its hold, to a's fallback instead of
// answering code with the header lines and msg; count counts the request
// when that answer is given after all. It returns what ServeRequest
// returns.
func (rt *Router) fallbackH1(cc *h1.Conn, rq *h1.Request, a *app, code int, header, msg string, count func(*app)) bool {
	if _, n := cc.Header(fallbackHop); n > 0 {
		count(a)
		return cc.Answer(code, header, msg)
	}
	cc.AddHeader(FallbackHopHeader, "1")
	addr := a.cfg.Load().Fallback
	up := rt.upstreams.get(addr)
	failed := false
	cc.OnUpstreamFailure(func(err error) (int, string, string) {
		failed = true
		rt.opts.Log.Info("fallback failed; answering as without one", "app", a.key.String(), "fallback", addr, "status", code, "error", err.Error())
		return code, header, msg
	})
	cc.SetTimeouts(rt.timeouts(a))
	keep := cc.RoundTrip(up.pool, rq)
	switch {
	case failed:
		count(a)
	case cc.Status() != 0:
		rt.opts.Metrics.countFallback()
	}
	rt.opts.Requests.ObserveH1(cc)
	return keep
}

// fallbackKey is the context key of a request sent to a fallback by
// net/http's path (*fallbackReq).
type fallbackKey struct{}

// fallbackReq is a request on its way to a fallback, and the answer it
// gets if the fallback fails.
type fallbackReq struct {
	addr       string
	h2         bool
	code       int
	retryAfter string // "" for none
	msg        string
	failed     bool
}

// newFallbackProxy is the one reverse proxy of every fallback, for what
// net/http serves: its target and the answer it falls back on are in the
// request's context.
func (p *upstreams) newFallbackProxy(rt *Router) *httputil.ReverseProxy {
	h1t, h2t := p.h1, p.h2
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			f := pr.In.Context().Value(fallbackKey{}).(*fallbackReq)
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = f.addr
			pr.Out.Host = pr.In.Host
			pr.Out.Header.Set(FallbackHopHeader, "1")
			h1.SetForwarded(pr)
			h1.KeepTarget(pr)
			h1.ForwardTrailers(pr)
		},
		Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.Context().Value(fallbackKey{}).(*fallbackReq).h2 {
				return h2t.RoundTrip(r)
			}
			return h1t.RoundTrip(r)
		}),
		BufferPool: p.pool,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			f := r.Context().Value(fallbackKey{}).(*fallbackReq)
			f.failed = true
			rt.opts.Log.Info("fallback failed; answering as without one", "host", r.Host, "fallback", f.addr, "status", f.code, "error", err.Error())
			if f.retryAfter != "" {
				w.Header().Set("Retry-After", f.retryAfter)
			}
			http.Error(w, f.msg, f.code)
		},
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// fallbackHTTP is fallbackH1 for a request net/http serves.
func (rt *Router) fallbackHTTP(w http.ResponseWriter, r *http.Request, a *app, code int, retryAfter, msg string, count func(*app)) {
	if len(r.Header.Values(FallbackHopHeader)) > 0 {
		count(a)
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		http.Error(w, msg, code)
		return
	}
	// gRPC stays HTTP/2 (h2c); anything else goes over HTTP/1.1, which
	// any fallback speaks.
	f := &fallbackReq{addr: a.cfg.Load().Fallback, h2: r.ProtoMajor == 2 && reqmetrics.IsGRPC(r), code: code, retryAfter: retryAfter, msg: msg}
	w, r, cancel := rt.withTimeouts(w, r.WithContext(context.WithValue(r.Context(), fallbackKey{}, f)), a)
	defer cancel()
	rw := &reqmetrics.Writer{ResponseWriter: w}
	start := time.Now()
	rt.fallback.ServeHTTP(rw, r)
	if f.failed {
		count(a)
		return
	}
	rt.opts.Metrics.countFallback()
	rt.opts.Requests.Record(rw, r, start)
}

// timedOutErr tells a request cut by its route's timeouts on net/http's
// path.
func timedOutErr(err error) bool {
	var te *h1.ResponseTimeoutError
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &te)
}

// headerTimeoutKey is the context key of a request's response-header
// timeout on net/http's path (a time.Duration; zero: none).
type headerTimeoutKey struct{}

// timeouts are a's bounds of a request forwarded to it.
func (rt *Router) timeouts(a *app) h1.Timeouts {
	t := a.cfg.Load().Timeouts
	if t.Request == 0 {
		t.Request = rt.opts.RequestTimeout
	}
	if t.ResponseHeader == 0 {
		t.ResponseHeader = rt.opts.ResponseHeaderTimeout
	}
	if t.StreamIdle == 0 {
		t.StreamIdle = rt.opts.StreamIdleTimeout
	}
	return t
}

// withTimeouts gives r, forwarded to a by net/http's path, a's request,
// response-header and stream idle timeouts: the answer goes through the
// returned writer; call cancel once it is done. Once the response head is
// out, a stream idle timeout cancels r when no byte has gone either way
// for that long (net/http then ends both sides: the client's stream or
// connection, the app's). The request timeout does not bound the tunnel
// of a 101 (headerTimeout stops it), as on the engine's path.
func (rt *Router) withTimeouts(w http.ResponseWriter, r *http.Request, a *app) (http.ResponseWriter, *http.Request, context.CancelFunc) {
	t := rt.timeouts(a)
	ctx := r.Context()
	if t.ResponseHeader > 0 {
		ctx = context.WithValue(ctx, headerTimeoutKey{}, t.ResponseHeader)
	}
	cancel := context.CancelFunc(func() {})
	if t.Request > 0 {
		// Not context.WithTimeout: a 101's tunnel outlives the request
		// timeout, as on the engine's path (h1.Timeouts.Request); only the
		// stream idle timeout bounds it. headerTimeout stops the timer when
		// the app answers 101.
		var stopReq context.CancelCauseFunc
		ctx, stopReq = context.WithCancelCause(ctx)
		timer := time.AfterFunc(t.Request, func() { stopReq(context.DeadlineExceeded) })
		ctx = context.WithValue(ctx, requestTimerKey{}, timer)
		cancel = func() {
			timer.Stop()
			stopReq(nil)
		}
	}
	if t.StreamIdle > 0 {
		var stop context.CancelCauseFunc
		ctx, stop = context.WithCancelCause(ctx)
		s := &idleStream{ResponseWriter: w, idle: t.StreamIdle, stop: stop}
		w = s
		r = r.WithContext(ctx)
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = &idleBody{ReadCloser: r.Body, s: s}
		}
		outer := cancel
		cancel = func() {
			s.end()
			stop(nil)
			outer()
		}
		return w, r, cancel
	}
	return w, r.WithContext(ctx), cancel
}

// errStreamIdle ends a request of net/http's path silent past its stream
// idle timeout.
var errStreamIdle = errors.New("no byte either way within the stream idle timeout")

// idleStream is a response writer that notes when a byte last went
// either way, and cancels its request once none has for idle.
type idleStream struct {
	http.ResponseWriter
	idle time.Duration
	last atomic.Int64 // unix nanos
	stop context.CancelCauseFunc

	mu    sync.Mutex
	timer *time.Timer // from the response head on
	ended bool
}

func (s *idleStream) touch() { s.last.Store(time.Now().UnixNano()) }

// start begins the watch, with the response head.
func (s *idleStream) start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.timer == nil && !s.ended {
		s.touch()
		s.timer = time.AfterFunc(s.idle, s.check)
	}
}

// end stops the watch.
func (s *idleStream) end() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended = true
	if s.timer != nil {
		s.timer.Stop()
	}
}

func (s *idleStream) check() {
	quiet := time.Since(time.Unix(0, s.last.Load()))
	if quiet >= s.idle {
		s.stop(errStreamIdle)
		return
	}
	s.mu.Lock()
	if !s.ended {
		s.timer.Reset(s.idle - quiet)
	}
	s.mu.Unlock()
}

func (s *idleStream) WriteHeader(code int) {
	s.ResponseWriter.WriteHeader(code)
	if code >= 200 || code == http.StatusSwitchingProtocols {
		s.start()
	}
}

func (s *idleStream) Write(b []byte) (int, error) {
	s.start() // a Write without WriteHeader sends a 200 head
	n, err := s.ResponseWriter.Write(b)
	s.touch()
	return n, err
}

// Unwrap lets http.ResponseController flush through (streams).
func (s *idleStream) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// idleBody notes the request body's bytes in its idleStream.
type idleBody struct {
	io.ReadCloser
	s *idleStream
}

func (b *idleBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.s.touch()
	}
	return n, err
}

// headerTimeout bounds the wait for a response head by the request's
// response-header timeout (headerTimeoutKey), net/http's path's
// ResponseHeaderTimeout per request.
type headerTimeout struct{ next http.RoundTripper }

func (t headerTimeout) RoundTrip(r *http.Request) (*http.Response, error) {
	d, _ := r.Context().Value(headerTimeoutKey{}).(time.Duration)
	if d <= 0 {
		return upgraded(t.next.RoundTrip(r))
	}
	ctx, cancel := context.WithCancelCause(r.Context())
	timer := time.AfterFunc(d, func() { cancel(&h1.ResponseTimeoutError{After: d}) })
	resp, err := t.next.RoundTrip(r.WithContext(ctx))
	if !timer.Stop() && err != nil {
		return nil, context.Cause(ctx)
	}
	// The body is read under ctx: it ends with the request's own context.
	return upgraded(resp, err)
}

// requestTimerKey is the context key of the timer of a request's request
// timeout on net/http's path (withTimeouts).
type requestTimerKey struct{}

// upgraded stops the request timeout of a request the app answered 101:
// its tunnel is bounded by the stream idle timeout only.
func upgraded(resp *http.Response, err error) (*http.Response, error) {
	if err == nil && resp.StatusCode == http.StatusSwitchingProtocols && resp.Request != nil {
		if timer, ok := resp.Request.Context().Value(requestTimerKey{}).(*time.Timer); ok {
			timer.Stop()
		}
	}
	return resp, err
}
