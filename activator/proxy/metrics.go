package proxy

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metric names, documented in doc.go.
const (
	metricHeld           = "ebb_activator_held_requests"
	metricColdStart      = "ebb_activator_cold_start_duration_seconds"
	metricColdStartPhase = "ebb_activator_cold_start_phase_seconds"
	metricTimeouts       = "ebb_activator_cold_start_timeouts_total"
	metricQueueFull      = "ebb_activator_queue_full_total"
	metricRequests       = "ebb_activator_requests_total"
	metricRoutes         = "ebb_activator_routes"
)

// Metrics are the activator's Prometheus metrics, registered on one registry.
type Metrics struct {
	held           *prometheus.GaugeVec
	coldStart      *prometheus.HistogramVec
	coldStartPhase *prometheus.HistogramVec
	timeouts       *prometheus.CounterVec
	queueFull      *prometheus.CounterVec
	routes         prometheus.Gauge

	proxied, released, notFound, rejected, timedOut, canceled, placeholder prometheus.Counter
}

// NewMetrics registers the activator's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	appLabels := []string{"namespace", "app"}
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricRequests, Help: "Requests by outcome: proxied (warm), released (held, then forwarded), not_found, rejected (queue full), timeout, canceled (client left while held), placeholder."}, []string{"outcome"})
	m := &Metrics{
		held:           prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: metricHeld, Help: "Requests held now, per app: what the scaler adds to the sidecars' in-flight."}, appLabels),
		coldStart:      prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: metricColdStart, Help: "From the first request held for an app at zero to the first ready pod, per app.", Buckets: []float64{.05, .1, .25, .5, 1, 2, 3, 5, 8, 13, 21, 34, 60, 120, 300}}, appLabels),
		coldStartPhase: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: metricColdStartPhase, Help: "Each phase of a cold start, per app: ScalerTold, Scaled, PodCreated, PodScheduled, ContainersStarted, SidecarReady, FirstByte (see status.lastColdStart of the AppRoute). They add up to the time from the first request held to the first response byte forwarded.", Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2, 5, 10, 30, 60, 120}}, []string{"namespace", "app", "phase"}),
		timeouts:       prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricTimeouts, Help: "Held requests answered 504 after the cold-start timeout, per app."}, appLabels),
		queueFull:      prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricQueueFull, Help: "Requests answered 503 because the app's hold queue or the global cap was full, per app."}, appLabels),
		routes:         prometheus.NewGauge(prometheus.GaugeOpts{Name: metricRoutes, Help: "AppRoutes in the routing table this replica serves."}),
	}
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

// forget drops an app's series once the app is gone from the routing table,
// so deleted apps do not stay in /metrics forever.
func (m *Metrics) forget(namespace, app string) {
	m.held.DeleteLabelValues(namespace, app)
	m.coldStart.DeleteLabelValues(namespace, app)
	m.coldStartPhase.DeletePartialMatch(prometheus.Labels{"namespace": namespace, "app": app})
	m.timeouts.DeleteLabelValues(namespace, app)
	m.queueFull.DeleteLabelValues(namespace, app)
}
