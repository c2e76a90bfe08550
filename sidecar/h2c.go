package sidecar

import (
	"context"
	"errors"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/ebb-dev/ebb/internal/connfeed"
	h1 "github.com/ebb-dev/ebb/internal/http1"
	"github.com/ebb-dev/ebb/internal/reqmetrics"
	"github.com/ebb-dev/ebb/internal/staticanswer"
	"github.com/ebb-dev/ebb/internal/tracing"
)

// h2cServer serves the connections that start with the HTTP/2 preface
// (h2c with prior knowledge, gRPC included) with net/http, and proxies each
// stream to the app over one h2c transport built once. Its net/http server
// can be replaced (rotate) so that the connections it holds get a GOAWAY
// while new ones are still served.
type h2cServer struct {
	handler http.Handler
	idle    time.Duration
	header  time.Duration
	errLog  *log.Logger

	mu   sync.Mutex
	cur  *h2cGen
	old  []*h2cGen // rotated away, shutting down
	done bool
}

// h2cGen is one net/http server and the listener handOff feeds it.
type h2cGen struct {
	srv *http.Server
	ln  *connfeed.Listener
}

func newH2CServer(p *proxy) *h2cServer {
	var up http.Protocols
	up.SetUnencryptedHTTP2(true)
	dialer := &net.Dialer{Timeout: h1.DialTimeout, KeepAlive: -1}
	tr := &http.Transport{
		Protocols:           &up,
		DialContext:         dialer.DialContext,
		MaxIdleConnsPerHost: 16,
		// The app gets the client's Accept-Encoding, not one of the
		// transport's own (it added gzip, and unzipped the answer).
		DisableCompression: true,
		IdleConnTimeout:    h1.UpstreamIdleTimeout,
	}
	errLog := slog.NewLogLogger(logr.ToSlogHandler(p.log), slog.LevelDebug)
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = p.opts.Upstream
			h1.SetForwarded(pr) // as the engine does on HTTP/1.1
			h1.KeepTarget(pr)
			h1.ForwardTrailers(pr)
		},
		Transport:     tr,
		FlushInterval: -1, // gRPC and other streams: flush every write
		ErrorLog:      errLog,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			p.upstreamErrors.Add(1)
			if p.ctl != nil && p.ctl.timeout > 0 && errors.Is(context.Cause(r.Context()), errRequestTimeout) {
				p.log.V(1).Info("the app did not answer within the request timeout", "upstream", p.opts.Upstream, "timeout", p.ctl.timeout.String())
				http.Error(w, strings.TrimSuffix(timeoutBody(p.ctl.timeout), "\n"), http.StatusGatewayTimeout)
				return
			}
			p.log.V(1).Info("the app is not answering", "upstream", p.opts.Upstream, "error", err.Error())
			http.Error(w, "ebb-sidecar: the app is not answering on its port ("+p.opts.Upstream+"): "+err.Error(), http.StatusBadGateway)
		},
	}
	serve := p.serveH2(rp)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// As the HTTP/1.1 engine refuses a malformed method, a missing or
		// malformed Host, or a malformed target: not counted. (net/http's
		// h2 server checks none of them.)
		if !h1.ValidMethod(r.Method) {
			http.Error(w, "ebb-sidecar: malformed :method", http.StatusBadRequest)
			return
		}
		if !h1.ValidHost(r.Host) {
			http.Error(w, "ebb-sidecar: missing or malformed :authority (Host)", http.StatusBadRequest)
			return
		}
		if !h1.ValidTarget(r.RequestURI) {
			http.Error(w, "ebb-sidecar: malformed :path", http.StatusBadRequest)
			return
		}
		for name := range r.Trailer {
			// A declared trailer that is no field name (an empty one):
			// net/http's transport would not send the request on (502).
			if !h1.ValidFieldName(name) {
				http.Error(w, "ebb-sidecar: malformed trailer field name", http.StatusBadRequest)
				return
			}
		}
		p.arrived()
		start := time.Now()
		if p.ctl != nil {
			p.serveH2Controlled(w, r, start, serve)
			return
		}
		if p.cnt.on {
			p.cnt.begin(start)
			defer p.cnt.inFlight.Add(-1)
		}
		ctx, cancel := context.WithCancelCause(r.Context())
		defer cancel(nil)
		p.serveWatched(w, r.WithContext(ctx), cancel, start, serve)
	})
	h := &h2cServer{handler: handler, idle: p.opts.IdleTimeout, header: p.opts.HeaderTimeout, errLog: errLog}
	h.cur = h.newGen()
	return h
}

// serveH2Controlled serves one h2c stream under the route controls, as
// serveControlled an HTTP/1.1 request; the request timeout and the stream
// idle timeout reset the stream (502 or 504 before the response head).
// An AtZero rule exempts a stream without a body (END_STREAM on its
// HEADERS, or a content-length of 0: net/http's ContentLength is 0, and the
// reverse proxy sends the app none) that is no CONNECT.
func (p *proxy) serveH2Controlled(w http.ResponseWriter, r *http.Request, start time.Time, serve func(http.ResponseWriter, *http.Request, time.Time)) {
	c := p.ctl
	exempt := false
	if c.static != nil {
		if rule := c.static.Match(r.Method, r.RequestURI, func(name string) (string, bool) {
			v := r.Header.Values(name)
			if len(v) != 1 {
				return "", false
			}
			return v[0], true
		}); rule != nil {
			if rule.When == staticanswer.Always {
				c.countAnswer(rule)
				rule.WriteHTTP(w, r.Method)
				return
			}
			exempt = rule.Exempts() && r.ContentLength == 0 && r.Method != http.MethodConnect
		}
	}
	switch {
	case exempt:
		c.exempt.Add(1)
		defer c.exempt.Add(-1)
	case p.cnt.on:
		p.cnt.begin(start)
		defer p.cnt.inFlight.Add(-1)
	}
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	if c.timeout > 0 {
		t := time.AfterFunc(time.Until(start.Add(c.timeout)), func() { cancel(errRequestTimeout) })
		defer t.Stop()
	}
	if c.lim != nil {
		switch c.lim.acquire(waitCtx(ctx)) {
		case queueFull:
			w.Header().Set("Retry-After", "1")
			http.Error(w, strings.TrimSuffix(c.lim.queueFullBody(), "\n"), http.StatusServiceUnavailable)
			return
		case gaveUp:
			if errors.Is(context.Cause(ctx), errRequestTimeout) {
				http.Error(w, strings.TrimSuffix(timeoutBody(c.timeout), "\n"), http.StatusGatewayTimeout)
			}
			return
		}
		defer c.lim.release()
	}
	p.serveWatched(w, r.WithContext(ctx), cancel, start, serve)
}

// serveWatched serves an h2c stream watched for the stream idle timeout:
// cancel (r's context's) resets it.
func (p *proxy) serveWatched(w http.ResponseWriter, r *http.Request, cancel context.CancelCauseFunc, start time.Time, serve func(http.ResponseWriter, *http.Request, time.Time)) {
	is := &idleStream{ResponseWriter: w, idle: p.opts.StreamIdleTimeout, cancel: cancel}
	defer is.stop()
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = &idleBody{ReadCloser: r.Body, s: is}
	}
	serve(is, r, start)
}

// errRequestTimeout ends an h2c stream at its request timeout,
// errStreamIdle one silent for the stream idle timeout.
var (
	errRequestTimeout = errors.New("the request timeout passed")
	errStreamIdle     = errors.New("no byte either way for the stream idle timeout")
)

// idleStream is an h2c stream's response, watched for the stream idle
// timeout from its head on: no byte of the response written and none of
// the request body read for that long cancels the stream (the reverse
// proxy then resets it, and the app's).
type idleStream struct {
	http.ResponseWriter
	idle   time.Duration
	cancel context.CancelCauseFunc
	last   atomic.Int64 // unix nanos of the last byte either way

	mu      sync.Mutex
	timer   *time.Timer // from the head on
	stopped bool
}

func (s *idleStream) touch() { s.last.Store(time.Now().UnixNano()) }

// arm starts the watch (once).
func (s *idleStream) arm() {
	s.touch()
	s.mu.Lock()
	if s.timer == nil && !s.stopped {
		s.timer = time.AfterFunc(s.idle, s.check)
	}
	s.mu.Unlock()
}

func (s *idleStream) check() {
	since := time.Duration(time.Now().UnixNano() - s.last.Load())
	if since >= s.idle {
		s.cancel(errStreamIdle)
		return
	}
	s.mu.Lock()
	if !s.stopped {
		s.timer.Reset(s.idle - since)
	}
	s.mu.Unlock()
}

func (s *idleStream) stop() {
	s.mu.Lock()
	s.stopped = true
	if s.timer != nil {
		s.timer.Stop()
	}
	s.mu.Unlock()
}

func (s *idleStream) WriteHeader(code int) {
	s.ResponseWriter.WriteHeader(code)
	if code >= 200 {
		s.arm()
	}
}

func (s *idleStream) Write(b []byte) (int, error) {
	s.arm()
	n, err := s.ResponseWriter.Write(b)
	s.touch()
	return n, err
}

// Flush flushes the stream (the reverse proxy flushes every write).
func (s *idleStream) Flush() {
	http.NewResponseController(s.ResponseWriter).Flush()
	s.touch()
}

// Unwrap returns the wrapped writer (http.ResponseController).
func (s *idleStream) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// idleBody is an h2c request body whose reads count as bytes passing.
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

// serveH2 proxies one h2c stream (counted or not by the caller).
func (p *proxy) serveH2(rp *httputil.ReverseProxy) func(http.ResponseWriter, *http.Request, time.Time) {
	return func(w http.ResponseWriter, r *http.Request, start time.Time) {
		if p.tracer == nil {
			p.rec.Serve(rp, w, r, start)
			return
		}
		ctx, span := p.tracer.Start(tracing.Propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header)), "ebb-sidecar",
			trace.WithTimestamp(start), trace.WithSpanKind(trace.SpanKindServer))
		if span.SpanContext().IsSampled() {
			tracing.Propagator.Inject(ctx, propagation.HeaderCarrier(r.Header))
		}
		rw := &reqmetrics.Writer{ResponseWriter: w}
		rp.ServeHTTP(rw, r)
		p.rec.Record(rw, r, start)
		if span.IsRecording() {
			span.SetAttributes(attribute.Int("http.response.status_code", rw.Code), attribute.String("server.address", r.Host))
			if rw.Code == 0 || rw.Code >= 500 {
				span.SetStatus(codes.Error, "")
			}
		}
		span.End()
	}
}

func (h *h2cServer) newGen() *h2cGen {
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	g := &h2cGen{
		// No ReadHeaderTimeout: the head's deadline, which the HTTP/1.1
		// engine keeps on the connection, bounds the preface and the first
		// frame (h2cConn); after that:
		srv: &http.Server{
			Handler:   h.handler,
			Protocols: &protos,
			// A connection without an open stream this long gets a GOAWAY
			// and is closed a second later.
			IdleTimeout: h.idle,
			HTTP2: &http.HTTP2Config{
				// A client silent this long, streams open or not, is
				// pinged, and cut if it does not answer within the header
				// timeout: a client gone without a FIN does not keep its
				// requests counted for as long as the app holds them.
				SendPingTimeout: h.idle,
				PingTimeout:     h.header,
				// A client that stops reading is cut as the HTTP/1.1
				// engine cuts one: after the idle timeout without progress.
				WriteByteTimeout: h.idle,
			},
			ErrorLog: h.errLog,
		},
		ln: connfeed.New(),
	}
	go g.srv.Serve(g.ln) // returns when ln closes
	return g
}

// handOff gives a connection to the current h2c server; false once the
// h2c server is shut down.
func (h *h2cServer) handOff(c net.Conn) bool {
	hc := newH2CConn(c)
	for {
		h.mu.Lock()
		g, done := h.cur, h.done
		h.mu.Unlock()
		if done {
			return false
		}
		if g.ln.Feed(hc) {
			return true
		}
		// rotated away meanwhile: try the new one
	}
}

// rotate sends a GOAWAY to every h2c connection (their clients open new
// ones, through the Service, to whoever serves it now) and lets their open
// streams finish until deadline, while new connections are still served.
func (h *h2cServer) rotate(deadline time.Time) {
	h.mu.Lock()
	if h.done {
		h.mu.Unlock()
		return
	}
	old := h.cur
	h.cur = h.newGen()
	h.old = append(h.old, old)
	h.mu.Unlock()
	go func() {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		defer cancel()
		if old.srv.Shutdown(ctx) != nil {
			old.srv.Close()
		}
	}()
}

// shutdown sends a GOAWAY to every h2c connection, refuses new ones and
// waits for open streams until ctx ends; false if some were still open.
func (h *h2cServer) shutdown(ctx context.Context) bool {
	h.mu.Lock()
	h.done = true
	gens := append([]*h2cGen{h.cur}, h.old...)
	h.mu.Unlock()
	clean := true
	for _, g := range gens {
		if g.srv.Shutdown(ctx) != nil {
			clean = false
		}
	}
	return clean
}

// close cuts every h2c connection.
func (h *h2cServer) close() {
	h.mu.Lock()
	h.done = true
	gens := append([]*h2cGen{h.cur}, h.old...)
	h.mu.Unlock()
	for _, g := range gens {
		g.srv.Close()
	}
}

// prefaceLen is the length of the HTTP/2 client preface
// ("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), frameHeaderLen of a frame header.
const (
	prefaceLen     = 24
	frameHeaderLen = 9
)

// h2cConn is a connection handed to the h2c server. Until the client's
// preface and its first frame (a SETTINGS frame, or the server refuses the
// connection) have been read whole, the read deadline the HTTP/1.1 engine
// set for the request head stays: net/http clears it once it has the
// preface, and its own wait for the first SETTINGS is a fixed 2 s, so
// without this a client that sends part of the preface, or the preface and
// no frame, would hold the connection for ever, or for longer than any
// request head. What net/http asks for meanwhile is applied once the first
// frame is in.
type h2cConn struct {
	net.Conn
	// guarding, off, end and hdr are written by Read only (one reader at a
	// time: net/http's, then the h2 server's frame reader); guarding is
	// written under mu so that SetReadDeadline sees it.
	guarding bool
	off      int // bytes read so far
	end      int // off at the end of the first frame; -1 until its header is read
	hdr      [frameHeaderLen]byte
	mu       sync.Mutex
	asked    time.Time // the read deadline net/http last asked for while guarding
}

func newH2CConn(c net.Conn) *h2cConn { return &h2cConn{Conn: c, guarding: true, end: -1} }

func (c *h2cConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if c.guarding && n > 0 {
		c.observe(b[:n])
	}
	return n, err
}

// observe follows the bytes read through the preface and the first frame's
// header and payload, and lifts the guard at the end of that frame.
func (c *h2cConn) observe(p []byte) {
	for len(p) > 0 {
		var k int
		switch {
		case c.off < prefaceLen:
			k = min(len(p), prefaceLen-c.off)
		case c.off < prefaceLen+frameHeaderLen:
			k = copy(c.hdr[c.off-prefaceLen:], p)
			if c.off+k == prefaceLen+frameHeaderLen {
				c.end = prefaceLen + frameHeaderLen + (int(c.hdr[0])<<16 | int(c.hdr[1])<<8 | int(c.hdr[2]))
			}
		default:
			k = min(len(p), c.end-c.off)
		}
		c.off += k
		p = p[k:]
		if c.end >= 0 && c.off >= c.end {
			c.mu.Lock()
			c.guarding = false
			c.Conn.SetReadDeadline(c.asked)
			c.mu.Unlock()
			return
		}
	}
}

func (c *h2cConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.guarding {
		c.asked = t
		return nil
	}
	return c.Conn.SetReadDeadline(t)
}

// SetDeadline sets the write deadline and, as SetReadDeadline, the read
// deadline.
func (c *h2cConn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.Conn.SetWriteDeadline(t)
}
