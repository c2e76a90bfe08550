package sidecar

import (
	"context"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

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
	errLog  *log.Logger

	mu   sync.Mutex
	cur  *h2cGen
	old  []*h2cGen // rotated away, shutting down
	done bool
}

// h2cGen is one net/http server and the listener handOff feeds it.
type h2cGen struct {
	srv *http.Server
	ln  *chanListener
}

func newH2CServer(p *proxy) *h2cServer {
	var up http.Protocols
	up.SetUnencryptedHTTP2(true)
	dialer := &net.Dialer{Timeout: h1.DialTimeout, KeepAlive: -1}
	tr := &http.Transport{
		Protocols:           &up,
		DialContext:         dialer.DialContext,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     h1.UpstreamIdleTimeout,
	}
	errLog := slog.NewLogLogger(logr.ToSlogHandler(p.log), slog.LevelDebug)
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = p.opts.Upstream
			pr.SetXForwarded()
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
		p.arrived()
		if strings.HasPrefix(r.Header.Get("User-Agent"), "kube-probe/") {
			rp.ServeHTTP(w, r)
			return
		}
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
	h := &h2cServer{handler: handler, idle: p.opts.IdleTimeout, errLog: errLog}
	h.cur = h.newGen()
	return h
}

func (h *h2cServer) newGen() *h2cGen {
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	g := &h2cGen{
		srv: &http.Server{
			Handler:     h.handler,
			Protocols:   &protos,
			IdleTimeout: h.idle,
			ErrorLog:    h.errLog,
		},
		ln: &chanListener{ch: make(chan net.Conn), done: make(chan struct{})},
	}
	go g.srv.Serve(g.ln) // returns when ln closes
	return g
}

// handOff gives a connection to the current h2c server; false once the
// h2c server is shut down.
func (h *h2cServer) handOff(c net.Conn) bool {
	for {
		h.mu.Lock()
		g, done := h.cur, h.done
		h.mu.Unlock()
		if done {
			return false
		}
		select {
		case g.ln.ch <- c:
			return true
		case <-g.ln.done: // rotated away meanwhile: try the new one
		}
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

// chanListener is a net.Listener fed by handOff.
type chanListener struct {
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *chanListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }
