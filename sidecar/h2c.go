package sidecar

import (
	"context"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/ebb-dev/ebb/internal/connfeed"
	h1 "github.com/ebb-dev/ebb/internal/http1"
	"github.com/ebb-dev/ebb/internal/reqmetrics"
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
			p.log.V(1).Info("the app is not answering", "upstream", p.opts.Upstream, "error", err.Error())
			http.Error(w, "ebb-sidecar: the app is not answering on its port ("+p.opts.Upstream+"): "+err.Error(), http.StatusBadGateway)
		},
	}
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
		p.arrived()
		start := time.Now()
		if p.cnt.on {
			p.cnt.begin(start)
			defer p.cnt.inFlight.Add(-1)
		}
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
	})
	h := &h2cServer{handler: handler, idle: p.opts.IdleTimeout, header: p.opts.HeaderTimeout, errLog: errLog}
	h.cur = h.newGen()
	return h
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
