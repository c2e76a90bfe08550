package proxy

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric names, documented in the metrics table of docs/operations.md.
const (
	metricHeld           = "ebb_activator_held_requests"
	metricColdStart      = "ebb_activator_cold_start_duration_seconds"
	metricColdStartPhase = "ebb_activator_cold_start_phase_seconds"
	metricTimeouts       = "ebb_activator_cold_start_timeouts_total"
	metricQueueFull      = "ebb_activator_queue_full_total"
	metricRequests       = "ebb_activator_requests_total"
	metricRoutes         = "ebb_activator_routes"
)

// coldStartBuckets are the bounds, in seconds, of the cold-start and
// phase histograms: 10 (13 series a histogram with +Inf, _sum and
// _count, as the request histogram of internal/reqmetrics). A phase that
// is one event away (ScalerTold, PodCreated, the FirstByte of a fast app)
// lands at or under 5 ms or 25 ms; those waiting on a controller or a
// probe (Scaled, PodScheduled, SidecarReady) in 25 ms to 1 s; whole cold
// starts and container starts take 1 to 15 s, where the bounds are
// densest (1, 2.5, 5 s: the usual objectives are exact); 15 s and 60 s
// tell a slow image pull or app start, and +Inf is over a minute (the
// default cold-start timeout is 2 minutes). Neighbouring bounds are 2 to
// 5 times apart.
var coldStartBuckets = []float64{.005, .025, .1, .25, .5, 1, 2.5, 5, 15, 60}

// Metrics are the activator's Prometheus metrics, registered on one registry.
type Metrics struct {
	held           *prometheus.GaugeVec
	coldStart      *prometheus.HistogramVec
	coldStartPhase *prometheus.HistogramVec
	phasesOnce     sync.Once
	phases         [nMarks - 1]prometheus.Observer // made with the first cold start
	timeouts       *prometheus.CounterVec
	queueFull      *prometheus.CounterVec
	routes         prometheus.Gauge

	proxied, released, notFound, rejected, timedOut, canceled, placeholder prometheus.Counter
	// requests makes the outcomes that most activators never see on their
	// first use: static, fallback.
	requests                 *prometheus.CounterVec
	staticOnce, fallbackOnce sync.Once
	static, fallback         prometheus.Counter
}

// NewMetrics registers the activator's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	appLabels := []string{"namespace", "app"}
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricRequests, Help: "Requests by outcome: proxied (warm), released (held, then forwarded), not_found, rejected (queue full), timeout, canceled (client left while held), placeholder, static (answered by a static response of the route), fallback (sent to the route's fallback Service at its cold-start timeout or with its queue full)."}, []string{"outcome"})
	m := &Metrics{
		held:           prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: metricHeld, Help: "Requests held now, per app: what the scaler adds to the sidecars' in-flight."}, appLabels),
		coldStart:      prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: metricColdStart, Help: "From the first request held for an app at zero to the first ready pod, per app.", Buckets: coldStartBuckets}, appLabels),
		coldStartPhase: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: metricColdStartPhase, Help: "Each phase of the cold starts of every app this activator held requests for: ScalerTold, Scaled, PodCreated, PodScheduled, ContainersStarted, SidecarReady, FirstByte. They add up to the time from the first request held to the first response byte forwarded. One app's phases: its AppRoute's status.lastColdStart and the traces.", Buckets: coldStartBuckets}, []string{"phase"}),
		timeouts:       prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricTimeouts, Help: "Held requests answered 504 after the cold-start timeout, per app."}, appLabels),
		queueFull:      prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricQueueFull, Help: "Requests answered 503 because the app's hold queue or the global cap was full, per app."}, appLabels),
		routes:         prometheus.NewGauge(prometheus.GaugeOpts{Name: metricRoutes, Help: "AppRoutes in the routing table this replica serves."}),
	}
	m.requests = requests
	m.proxied = requests.WithLabelValues("proxied")
	m.released = requests.WithLabelValues("released")
	m.notFound = requests.WithLabelValues("not_found")
	m.rejected = requests.WithLabelValues("rejected")
	m.timedOut = requests.WithLabelValues("timeout")
	m.canceled = requests.WithLabelValues("canceled")
	m.placeholder = requests.WithLabelValues("placeholder")
	reg.MustRegister(m.held, m.coldStart, m.coldStartPhase, m.timeouts, m.queueFull, m.routes, requests)
	return m
}

// appSeries are one app's series, each made on its first use: an app
// never held exports none; one woken exports its held gauge and its
// cold-start histogram, 14 series. The phases are not per app: they would
// be 91 more, for what the AppRoute's status.lastColdStart shows. Guarded
// by the app's mu.
type appSeries struct {
	held                prometheus.Gauge
	coldStart           prometheus.Observer
	timeouts, queueFull prometheus.Counter
}

// seriesLocked returns a's series, nil when a's route is gone: a series
// made then would outlive the app in /metrics. Callers hold a.mu.
func (a *app) seriesLocked() *appSeries {
	if a.gone.Load() {
		return nil
	}
	if a.series == nil {
		a.series = &appSeries{}
	}
	return a.series
}

// setHeldLocked sets a's held gauge. Callers hold a.mu.
func (m *Metrics) setHeldLocked(a *app) {
	s := a.seriesLocked()
	if s == nil {
		return
	}
	if s.held == nil {
		s.held = m.held.WithLabelValues(a.key.Namespace, a.key.Name)
	}
	s.held.Set(float64(a.held))
}

// observeColdStartLocked records a cold start of a that took d until its
// first ready pod. Callers hold a.mu.
func (m *Metrics) observeColdStartLocked(a *app, d time.Duration) {
	s := a.seriesLocked()
	if s == nil {
		return
	}
	if s.coldStart == nil {
		s.coldStart = m.coldStart.WithLabelValues(a.key.Namespace, a.key.Name)
	}
	s.coldStart.Observe(d.Seconds())
}

// observePhases records the phases of a finished cold start in the
// phase histogram, whose series are made with the first.
func (m *Metrics) observePhases(phases *[nMarks - 1]time.Duration) {
	m.phasesOnce.Do(func() {
		for i, name := range PhaseNames {
			m.phases[i] = m.coldStartPhase.WithLabelValues(name)
		}
	})
	for i, p := range phases {
		m.phases[i].Observe(p.Seconds())
	}
}

// countStatic counts a request answered by a static response; its series
// is made with the first.
func (m *Metrics) countStatic() {
	m.staticOnce.Do(func() { m.static = m.requests.WithLabelValues("static") })
	m.static.Inc()
}

// countFallback counts a request answered by a route's fallback; its
// series is made with the first.
func (m *Metrics) countFallback() {
	m.fallbackOnce.Do(func() { m.fallback = m.requests.WithLabelValues("fallback") })
	m.fallback.Inc()
}

// countTimeout counts a held request of a answered 504.
func (m *Metrics) countTimeout(a *app) {
	m.timedOut.Inc()
	a.mu.Lock()
	defer a.mu.Unlock()
	if s := a.seriesLocked(); s != nil {
		if s.timeouts == nil {
			s.timeouts = m.timeouts.WithLabelValues(a.key.Namespace, a.key.Name)
		}
		s.timeouts.Inc()
	}
}

// countRejected counts a request to a answered 503 because a queue was
// full.
func (m *Metrics) countRejected(a *app) {
	m.rejected.Inc()
	a.mu.Lock()
	defer a.mu.Unlock()
	if s := a.seriesLocked(); s != nil {
		if s.queueFull == nil {
			s.queueFull = m.queueFull.WithLabelValues(a.key.Namespace, a.key.Name)
		}
		s.queueFull.Inc()
	}
}

// forgetLocked deletes the series of a, whose route is gone, so that
// apps come and go without /metrics growing; a.gone is set, so none is
// made again unless the route comes back. Callers hold a.mu.
func (m *Metrics) forgetLocked(a *app) {
	s := a.series
	if s == nil {
		return
	}
	a.series = nil
	ns, name := a.key.Namespace, a.key.Name
	if s.held != nil {
		m.held.DeleteLabelValues(ns, name)
	}
	if s.coldStart != nil {
		m.coldStart.DeleteLabelValues(ns, name)
	}
	if s.timeouts != nil {
		m.timeouts.DeleteLabelValues(ns, name)
	}
	if s.queueFull != nil {
		m.queueFull.DeleteLabelValues(ns, name)
	}
}
