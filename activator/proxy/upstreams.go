package proxy

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"sync"
	"time"

	"github.com/go-logr/logr"

	h1 "github.com/ebb-dev/ebb/internal/http1"
)

// bufferPool is the one buffer pool every reverse proxy shares.
type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte {
	if v, ok := b.p.Get().(*[]byte); ok {
		return *v
	}
	return make([]byte, 32<<10)
}

func (b *bufferPool) Put(buf []byte) { b.p.Put(&buf) }

// upstream is one app endpoint (a sidecar's data port) with its proxies,
// built once and shared by every request to it: the keep-alive pool of the
// HTTP/1.1 engine (warm requests, Server), and reverse proxies for what
// net/http serves (released held requests, h2c and gRPC).
type upstream struct {
	addr   string
	pool   *h1.Upstream
	h1, h2 *httputil.ReverseProxy
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor == 2 {
		u.h2.ServeHTTP(w, r)
		return
	}
	u.h1.ServeHTTP(w, r)
}

// upstreams builds and caches each address's upstream.
type upstreams struct {
	h1, h2 http.RoundTripper
	pool   *bufferPool
	log    logr.Logger
	m      sync.Map // addr → *upstream
}

func newUpstreams(log logr.Logger) *upstreams {
	dialer := &net.Dialer{Timeout: 3 * time.Second, KeepAlive: 30 * time.Second}
	h1 := &http.Transport{
		DialContext:           dialer.DialContext,
		MaxIdleConns:          0, // no global cap; per host below
		MaxIdleConnsPerHost:   512,
		IdleConnTimeout:       90 * time.Second,
		DisableCompression:    true,
		ExpectContinueTimeout: time.Second,
	}
	h1.Protocols = new(http.Protocols)
	h1.Protocols.SetHTTP1(true)
	h2 := &http.Transport{
		DialContext:        dialer.DialContext,
		IdleConnTimeout:    90 * time.Second,
		DisableCompression: true,
	}
	h2.Protocols = new(http.Protocols)
	h2.Protocols.SetUnencryptedHTTP2(true)
	return &upstreams{h1: headerTimeout{h1}, h2: headerTimeout{h2}, pool: &bufferPool{}, log: log}
}

func (p *upstreams) get(addr string) *upstream {
	if u, ok := p.m.Load(addr); ok {
		return u.(*upstream)
	}
	u := &upstream{addr: addr, pool: h1.NewUpstream(addr), h1: p.reverseProxy(addr, p.h1), h2: p.reverseProxy(addr, p.h2)}
	actual, _ := p.m.LoadOrStore(addr, u)
	return actual.(*upstream)
}

// forget drops the upstreams not in keep and closes their pooled
// connections (those in use close when their exchange ends).
func (p *upstreams) forget(keep map[string]bool) {
	p.m.Range(func(k, v any) bool {
		if !keep[k.(string)] {
			p.m.Delete(k)
			v.(*upstream).pool.CloseIdle(time.Now(), 0)
		}
		return true
	})
}

func (p *upstreams) reverseProxy(addr string, rt http.RoundTripper) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = addr
			pr.Out.Host = pr.In.Host // the app may route by Host
			h1.SetForwarded(pr)      // as the engine does on the warm path
			h1.KeepTarget(pr)
			h1.ForwardTrailers(pr)
		},
		Transport:  rt,
		BufferPool: p.pool,
		ErrorLog:   nil,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			p.log.V(1).Info("upstream failed", "upstream", addr, "host", r.Host, "error", err.Error())
			code := http.StatusBadGateway
			// The HTTP/2 transport reports a request timeout as the
			// context's cancelation; its cause tells (withTimeouts).
			if cause := context.Cause(r.Context()); !timedOutErr(err) && timedOutErr(cause) {
				err = cause
			}
			if timedOutErr(err) {
				code = http.StatusGatewayTimeout
			}
			http.Error(w, fmt.Sprintf("ebb-activator: upstream %s failed: %v", addr, err), code)
		},
	}
}
