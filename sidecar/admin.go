package sidecar

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ebb-dev/ebb/internal/procmetrics"
	"github.com/ebb-dev/ebb/internal/readiness"
	"github.com/ebb-dev/ebb/internal/sidecarapi"
)

var (
	statsContentType = []string{sidecarapi.StatsContentType}
	noStore          = []string{"no-store"}
	statsBufs        = sync.Pool{New: func() any { b := make([]byte, 0, sidecarapi.MaxStatsLine); return &b }}
)

// adminHandler serves sidecarapi.StatsPath, sidecarapi.ReadyPath and /metrics.
func (p *proxy) adminHandler(bootID uint64) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+sidecarapi.StatsPath, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.RawQuery == "detail" {
			p.statsDetail(w)
			return
		}
		bp := statsBufs.Get().(*[]byte)
		snap := sidecarapi.Snapshot{InFlight: p.cnt.inFlight.Load(), Total: p.cnt.total.Load(), BootID: bootID, BusyFor: p.cnt.busyFor(time.Now())}
		b := snap.Append((*bp)[:0])
		h := w.Header()
		h["Content-Type"] = statsContentType
		h["Cache-Control"] = noStore
		w.Write(b)
		*bp = b
		statsBufs.Put(bp)
	})
	mux.HandleFunc("GET "+sidecarapi.ReadyPath, func(w http.ResponseWriter, r *http.Request) {
		switch {
		case p.draining.Load():
			http.Error(w, "draining", http.StatusServiceUnavailable)
		case !p.app.ready.Load() && !p.app.check(r.Context()):
			http.Error(w, p.app.why(), http.StatusServiceUnavailable)
		default:
			w.Write([]byte("ready\n"))
		}
	})
	mux.HandleFunc("GET "+sidecarapi.WaitForDrainPath, func(w http.ResponseWriter, r *http.Request) {
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

// statsDetail answers GET /stats?detail: the figures of the stats line,
// named, one a line, and the concurrency limit's when one is set, for
// people (the scaler reads the versioned line, which stays as it is).
func (p *proxy) statsDetail(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header()["Cache-Control"] = noStore
	b := []byte("in_flight ")
	b = strconv.AppendInt(b, p.cnt.inFlight.Load(), 10)
	b = append(b, "\ntotal "...)
	b = strconv.AppendUint(b, p.cnt.total.Load(), 10)
	b = append(b, "\nbusy_ms "...)
	b = strconv.AppendInt(b, p.cnt.busyFor(time.Now()).Milliseconds(), 10)
	if c := p.ctl; c != nil {
		b = append(b, "\nuncounted_in_flight "...)
		b = strconv.AppendInt(b, c.exempt.Load(), 10)
		if l := c.lim; l != nil {
			b = append(b, "\nconcurrency_limit "...)
			b = strconv.AppendInt(b, int64(l.limit), 10)
			b = append(b, "\nqueued "...)
			b = strconv.AppendInt(b, l.queued.Load(), 10)
			b = append(b, "\nqueue_limit "...)
			b = strconv.AppendInt(b, int64(l.queueMax), 10)
		}
	}
	b = append(b, '\n')
	w.Write(b)
}

// appState tracks whether the app is ready by its own readiness check
// (the app container's readiness probe, handed over by the webhook), or by
// its port accepting connections when it has none.
type appState struct {
	r     *readiness.Runner
	ready atomic.Bool

	mu                  sync.Mutex // one check at a time
	successes, failures int
	lastErr             string
}

func newAppState(opts Options) *appState {
	c := readiness.Check{PeriodSeconds: 1, FailureThreshold: 1}
	if opts.AppReadiness != "" {
		c, _ = readiness.Parse(opts.AppReadiness) // validated with the options
	} else {
		host, port, _ := net.SplitHostPort(opts.Upstream)
		n, _ := strconv.Atoi(port)
		c.TCP = &readiness.TCPSocket{Host: host, Port: int32(n)}
	}
	return &appState{r: readiness.NewRunner(c)}
}

// check runs the readiness check once and applies its thresholds; it
// reports whether the app is ready now.
func (a *appState) check(ctx context.Context) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	c := a.r.Check()
	if err := a.r.Run(ctx); err != nil {
		a.successes, a.failures, a.lastErr = 0, a.failures+1, err.Error()
		if a.failures >= c.Failures() || !a.ready.Load() {
			a.ready.Store(false)
		}
	} else {
		a.successes, a.failures, a.lastErr = a.successes+1, 0, ""
		if a.successes >= c.Successes() {
			a.ready.Store(true)
		}
	}
	return a.ready.Load()
}

// why says why the app is not ready.
func (a *appState) why() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return "the app is not ready: " + a.r.Check().Describe() + ": " + a.lastErr
}

// watch checks the app every readiness.NotReadyPeriod while it is not
// ready and every period of its probe once it is, until ctx ends.
func (a *appState) watch(ctx context.Context) {
	for {
		d := readiness.NotReadyPeriod
		if a.check(ctx) {
			d = a.r.Check().Period()
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
		}
	}
}

// registry holds the sidecar's metrics; the counters are read from the
// atomics at scrape time, so the hot path pays nothing for them.
func (p *proxy) registry() *prometheus.Registry {
	reg := p.metrics
	if reg == nil {
		reg = p.reg
	}
	reg.MustRegister(procmetrics.Collectors()...)
	reg.MustRegister(p.ctl.collectors()...)
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "ebb_sidecar_requests_in_flight",
			Help: "Requests being served now; an open WebSocket counts until it closes.",
		}, func() float64 { return float64(p.cnt.inFlight.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "ebb_sidecar_requests_total",
			Help: "Requests received since the sidecar started (kubelet probes go to the app's own port, not through the sidecar).",
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
	return p.reg
}
