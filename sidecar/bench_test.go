package sidecar

import (
	"bufio"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

const smallResponse = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 14\r\n\r\nhello from vm\n"

// benchKeepAlive sends b.N requests over one keep-alive connection per
// goroutine to addr.
func benchKeepAlive(b *testing.B, addr string) {
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			b.Error(err)
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		req := []byte("GET / HTTP/1.1\r\nHost: bench\r\nUser-Agent: bench\r\n\r\n")
		for pb.Next() {
			if _, err := c.Write(req); err != nil {
				b.Error(err)
				return
			}
			if code, err := readRaw(br); err != nil || code != 200 {
				b.Errorf("response %d, %v", code, err)
				return
			}
		}
	})
}

// BenchmarkHandlerChain measures the whole HTTP/1.1 path of the sidecar
// (parse, count, forward over a pooled connection, copy back) on loopback;
// client and app are allocation-free, so allocs/op are the sidecar's.
func BenchmarkHandlerChain(b *testing.B) {
	for name, set := range map[string]func(*Options){
		"counting":           func(*Options) {},
		"not-counting":       func(o *Options) { o.Counting = false },
		"no-request-metrics": func(o *Options) { o.RequestMetrics = false },
		// Every route control on, none answering: two static rules that do
		// not match, a limit never reached, a request timeout.
		"route-controls": func(o *Options) {
			o.StaticResponses = `[{"name":"healthz","when":"Always","path":"/healthz"},{"name":"probe","path":"/probe"}]`
			o.Concurrency = 1000
			o.RequestTimeout = time.Minute
		},
	} {
		b.Run(name, func(b *testing.B) {
			o := testOptions(rawUpstream(b, smallResponse))
			set(&o)
			r := startSidecar(b, o)
			benchKeepAlive(b, r.addr)
		})
	}
}

// BenchmarkReverseProxyBaseline is the same path through a plain
// httputil.ReverseProxy, for comparison.
func BenchmarkReverseProxyBaseline(b *testing.B) {
	u, _ := url.Parse("http://" + rawUpstream(b, smallResponse))
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.Transport = &http.Transport{MaxIdleConnsPerHost: 1024}
	srv := httptest.NewServer(rp)
	b.Cleanup(srv.Close)
	benchKeepAlive(b, srv.Listener.Addr().String())
}

// BenchmarkDirect is the raw app alone: the floor of the two above.
func BenchmarkDirect(b *testing.B) {
	benchKeepAlive(b, rawUpstream(b, smallResponse))
}

// BenchmarkCounting is what counting adds to a request: three atomic
// operations, under contention from every CPU. Compare with the ns/op of
// BenchmarkHandlerChain for the share of a request's cost.
func BenchmarkCounting(b *testing.B) {
	c := &counters{on: true}
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c.inFlight.Add(1)
			c.total.Add(1)
			c.inFlight.Add(-1)
		}
	})
}

// BenchmarkStats is one scrape of the stats endpoint's handler.
func BenchmarkStats(b *testing.B) {
	h := (&proxy{cnt: &counters{on: true}, reg: prometheus.NewRegistry()}).adminHandler(1)
	req := httptest.NewRequest("GET", "/stats", nil)
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		h.ServeHTTP(w, req)
	}
}

type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *discardWriter) WriteHeader(int)             {}
