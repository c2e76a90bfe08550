package sidecar

import (
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ebb-dev/ebb/internal/stats"
)

// readyFor is how long a successful readiness dial is trusted.
const readyFor = time.Second

var (
	statsContentType = []string{stats.ContentType}
	noStore          = []string{"no-store"}
	statsBufs        = sync.Pool{New: func() any { b := make([]byte, 0, 64); return &b }}
)

// adminHandler serves stats.Path, stats.ReadyPath and /metrics.
func (p *proxy) adminHandler(bootID uint64) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+stats.Path, func(w http.ResponseWriter, _ *http.Request) {
		bp := statsBufs.Get().(*[]byte)
		b := stats.Snapshot{InFlight: p.cnt.inFlight.Load(), Total: p.cnt.total.Load(), BootID: bootID}.Append((*bp)[:0])
		h := w.Header()
		h["Content-Type"] = statsContentType
		h["Cache-Control"] = noStore
		w.Write(b)
		*bp = b
		statsBufs.Put(bp)
	})
	mux.HandleFunc("GET "+stats.ReadyPath, func(w http.ResponseWriter, _ *http.Request) {
		switch {
		case p.draining.Load():
			http.Error(w, "draining", http.StatusServiceUnavailable)
		case !p.appAnswers():
			http.Error(w, "the app is not answering on its port ("+p.opts.Upstream+")", http.StatusServiceUnavailable)
		default:
			w.Write([]byte("ready\n"))
		}
	})
	mux.HandleFunc("GET "+stats.WaitForDrainPath, func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		if p.beginClosing() {
			p.h2.rotate(start.Add(p.opts.DrainTimeout))
		}
		p.log.Info("preStop: waiting for a quiet period", "delay", p.opts.DrainDelay.String(), "inFlight", p.cnt.inFlight.Load())
		quiet := p.waitQuiet(r.Context(), p.opts.DrainDelay, start.Add(p.opts.DrainTimeout))
		p.log.Info("preStop: done", "quiet", quiet, "took", time.Since(start).String(), "inFlight", p.cnt.inFlight.Load())
		if !quiet {
			http.Error(w, "still serving: requests kept arriving or in flight", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("drained\n"))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(p.registry(), promhttp.HandlerOpts{}))
	return mux
}

// appAnswers reports whether the app accepts connections on its port.
func (p *proxy) appAnswers() bool {
	now := time.Now()
	if now.UnixNano()-p.readyAt.Load() < int64(readyFor) {
		return true
	}
	c, err := net.DialTimeout("tcp", p.opts.Upstream, 500*time.Millisecond)
	if err != nil {
		return false
	}
	c.Close()
	p.readyAt.Store(now.UnixNano())
	return true
}

// registry holds the sidecar's metrics; the counters are read from the
// atomics at scrape time, so the hot path pays nothing for them.
func (p *proxy) registry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "ebb_sidecar_requests_in_flight",
			Help: "Requests being served now; an open WebSocket counts until it closes.",
		}, func() float64 { return float64(p.cnt.inFlight.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "ebb_sidecar_requests_total",
			Help: "Requests received since the sidecar started (kubelet probes excluded).",
		}, func() float64 { return float64(p.cnt.total.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "ebb_sidecar_upstream_errors_total",
			Help: "Requests answered 502 because the app did not answer on its port.",
		}, func() float64 { return float64(p.upstreamErrors.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "ebb_sidecar_client_connections",
			Help: "Open HTTP/1.1 client connections.",
		}, func() float64 { return float64(p.srv.OpenConns()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "ebb_sidecar_draining",
			Help: "1 while the sidecar drains after SIGTERM.",
		}, func() float64 {
			if p.draining.Load() {
				return 1
			}
			return 0
		}),
	)
	return reg
}
