package sidecar

import (
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"

	"github.com/go-logr/logr"

	h1 "github.com/ebb-dev/ebb/internal/proxy"
)

// h2cServer serves the connections that start with the HTTP/2 preface
// (h2c with prior knowledge, gRPC included) with net/http, and proxies each
// stream to the app over one h2c transport built once.
type h2cServer struct {
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
		if p.cnt.on && !strings.HasPrefix(r.Header.Get("User-Agent"), "kube-probe/") {
			p.cnt.inFlight.Add(1)
			p.cnt.total.Add(1)
			defer p.cnt.inFlight.Add(-1)
		}
		rp.ServeHTTP(w, r)
	})
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	h := &h2cServer{
		srv: &http.Server{
			Handler:     handler,
			Protocols:   &protos,
			IdleTimeout: p.opts.IdleTimeout,
			ErrorLog:    errLog,
		},
		ln: &chanListener{ch: make(chan net.Conn), done: make(chan struct{})},
	}
	go h.srv.Serve(h.ln) // returns when ln closes
	return h
}

// handOff gives a connection to the h2c server; false if it is closed.
func (h *h2cServer) handOff(c net.Conn) bool {
	select {
	case h.ln.ch <- c:
		return true
	case <-h.ln.done:
		return false
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
