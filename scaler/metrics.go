package scaler

import (
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ebb-dev/ebb/internal/procmetrics"
)

// Metric names; the per-app ones are computed at scrape time from the same
// figures KEDA gets, so they cost nothing per tick.
const (
	metricTick             = "ebb_scaler_tick_duration_seconds"
	metricSidecarPods      = "ebb_scaler_sidecar_pods"
	metricReadErrors       = "ebb_scaler_sidecar_read_errors_total"
	metricDropped          = "ebb_scaler_sidecar_dropped_total"
	metricRefused          = "ebb_scaler_sidecar_refused_total"
	metricSlowPods         = "ebb_scaler_sidecar_slow_pods"
	metricBypassedSeen     = "ebb_scaler_bypassed_pods_seen_total"
	metricStreams          = "ebb_scaler_isactive_streams"
	metricActivatorDropped = "ebb_scaler_activator_dropped_total"
	metricActivators       = "ebb_scaler_activators"

	metricAppConcurrency = "ebb_scaler_app_concurrency_requests"
	metricAppInFlight    = "ebb_scaler_app_inflight_requests"
	metricAppHeld        = "ebb_scaler_app_held_requests"
	metricAppRate        = "ebb_scaler_app_rate_requests_per_second"
	metricAppCounted     = "ebb_scaler_app_requests_total"
	metricAppColdStarts  = "ebb_scaler_app_cold_starts_total"
	metricAppPods        = "ebb_scaler_app_pods"
	metricAppActive      = "ebb_scaler_app_active"
	metricAppIdle        = "ebb_scaler_app_idle"
	metricAppBusy        = "ebb_scaler_app_busy_seconds"
)

type metrics struct {
	tickSeconds      prometheus.Histogram
	podsRead         prometheus.Gauge
	readErrors       prometheus.Counter
	droppedPods      prometheus.Counter
	refused          *prometheus.CounterVec
	slowPods         prometheus.Gauge
	bypassedSeen     prometheus.Counter
	streams          prometheus.Gauge
	activatorDropped prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, s *Scaler) *metrics {
	m := &metrics{
		tickSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: metricTick,
			Help:    "Time to read every sidecar and publish the per-app figures, per tick.",
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}}),
		podsRead:    prometheus.NewGauge(prometheus.GaugeOpts{Name: metricSidecarPods, Help: "Pods with a sidecar read at the last tick."}),
		readErrors:  prometheus.NewCounter(prometheus.CounterOpts{Name: metricReadErrors, Help: "Sidecar reads that failed or timed out."}),
		droppedPods: prometheus.NewCounter(prometheus.CounterOpts{Name: metricDropped, Help: "Times a sidecar that stopped answering had its last value dropped after --stale-ticks."}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricRefused,
			Help: "Sidecar answers refused, by reason: the answer (http, status, too_long, format) or its figures (in_flight, counter_backwards, rate, boot_churn); the pod is named in a StatsRefused event."}, []string{"reason"}),
		slowPods:         prometheus.NewGauge(prometheus.GaugeOpts{Name: metricSlowPods, Help: "Pods read off the tick at the last tick: their last read timed out or took more than half of --read-timeout."}),
		bypassedSeen:     prometheus.NewCounter(prometheus.CounterOpts{Name: metricBypassedSeen, Help: "Running app pods seen without an ebb-sidecar container (their apps are kept active)."}),
		streams:          prometheus.NewGauge(prometheus.GaugeOpts{Name: metricStreams, Help: "Open StreamIsActive streams."}),
		activatorDropped: prometheus.NewCounter(prometheus.CounterOpts{Name: metricActivatorDropped, Help: "Activators whose held counts were dropped after their stream ended."}),
	}
	reg.MustRegister(m.tickSeconds, m.podsRead, m.readErrors, m.droppedPods, m.refused, m.slowPods, m.bypassedSeen, m.streams, m.activatorDropped, appCollector{s})
	reg.MustRegister(procmetrics.Collectors()...)
	return m
}

var (
	appLabels       = []string{"namespace", "app"}
	descConcurrency = prometheus.NewDesc(metricAppConcurrency, "Requests in flight in the app's sidecars plus held by activators: the concurrency KEDA gets.", appLabels, nil)
	descInFlight    = prometheus.NewDesc(metricAppInFlight, "Requests in flight in the app's sidecars at the last tick.", appLabels, nil)
	descHeld        = prometheus.NewDesc(metricAppHeld, "Requests the activators hold for the app.", appLabels, nil)
	descRate        = prometheus.NewDesc(metricAppRate, "Requests per second counted over the default rate window (1m).", appLabels, nil)
	descCounted     = prometheus.NewDesc(metricAppCounted, "Requests counted by the app's sidecars since this scaler started.", appLabels, nil)
	descColdStarts  = prometheus.NewDesc(metricAppColdStarts, "Cold starts since this scaler started: times the activators began holding requests for the app while it had no ready pod (once per cold start, whatever the number of activators).", appLabels, nil)
	descPods        = prometheus.NewDesc(metricAppPods, "The app's pods by state: read (sidecar, Running with an IP), ready, stale (not answering, last value kept), dropped (not answering, not counted), bypassed (Running with no sidecar), refused (answering implausible figures, not counted; only while some are).", append(appLabels, "state"), nil)
	descActive      = prometheus.NewDesc(metricAppActive, "1 while the app is active with default metadata (any request in flight, held, counted within 1m, or a bypassed pod).", appLabels, nil)
	descIdle        = prometheus.NewDesc(metricAppIdle, "1 when nothing keeps the app active (it may scale to zero), 0 when something does; reason says what (the AppRoute's Idle condition): NoRequests, BelowActivation, KeptUpByAnotherTrigger, RequestsInFlight, RequestsHeld, RecentRequests, SidecarBypassed, NeededByDependents.", append(appLabels, "reason"), nil)
	descBusy        = prometheus.NewDesc(metricAppBusy, "How long some pod of the app has had requests in flight without a break: at least the age of the oldest open request (a WebSocket, a stream).", appLabels, nil)
	descActivators  = prometheus.NewDesc(metricActivators, "Activators whose held counts this scaler keeps.", nil, nil)
)

type appCollector struct{ s *Scaler }

func (c appCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descConcurrency, descInFlight, descHeld, descRate, descCounted, descColdStarts, descPods, descActive, descIdle, descBusy, descActivators} {
		ch <- d
	}
}

func (c appCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(descActivators, prometheus.GaugeValue, float64(len(c.s.hold.Activators())))
	for _, st := range c.s.appStatuses(time.Now(), DefaultRateWindow) {
		l := []string{st.Namespace, st.App}
		ch <- prometheus.MustNewConstMetric(descConcurrency, prometheus.GaugeValue, float64(st.Concurrency), l...)
		ch <- prometheus.MustNewConstMetric(descInFlight, prometheus.GaugeValue, float64(st.InFlight), l...)
		ch <- prometheus.MustNewConstMetric(descHeld, prometheus.GaugeValue, float64(st.Held), l...)
		ch <- prometheus.MustNewConstMetric(descRate, prometheus.GaugeValue, st.RatePerSecond, l...)
		ch <- prometheus.MustNewConstMetric(descCounted, prometheus.CounterValue, float64(st.RequestsCounted), l...)
		ch <- prometheus.MustNewConstMetric(descColdStarts, prometheus.CounterValue, float64(st.ColdStarts), l...)
		for _, p := range []struct {
			state string
			n     int
		}{{"read", st.Pods}, {"ready", st.ReadyPods}, {"stale", st.StalePods}, {"dropped", st.DroppedPods}, {"bypassed", st.BypassedPods}, {"refused", st.RefusedPods}} {
			if p.state == "refused" && p.n == 0 {
				continue // a series only where a pod was refused
			}
			ch <- prometheus.MustNewConstMetric(descPods, prometheus.GaugeValue, float64(p.n), append(l, p.state)...)
		}
		active := 0.0
		if st.Active {
			active = 1
		}
		ch <- prometheus.MustNewConstMetric(descActive, prometheus.GaugeValue, active, l...)
		idle := 0.0
		if st.Idle.Idle {
			idle = 1
		}
		ch <- prometheus.MustNewConstMetric(descIdle, prometheus.GaugeValue, idle, append(l, st.Idle.Reason)...)
		ch <- prometheus.MustNewConstMetric(descBusy, prometheus.GaugeValue, st.busy.Seconds(), l...)
	}
}

// AppStatus is one app's figures as GET /apps serves them, for people and for
// controllers built on top (the federation note in DESIGN.md).
type AppStatus struct {
	Namespace       string  `json:"namespace"`
	App             string  `json:"app"`
	Concurrency     int64   `json:"concurrency"` // in flight + held
	InFlight        int64   `json:"inFlight"`
	Held            int64   `json:"held"`
	RatePerSecond   float64 `json:"ratePerSecond"` // over Window
	Window          string  `json:"window"`
	RequestsCounted uint64  `json:"requestsCounted"` // since this scaler started
	ColdStarts      uint64  `json:"coldStarts"`      // since this scaler started
	Pods            int     `json:"pods"`            // read: sidecar, Running with an IP
	ReadyPods       int     `json:"readyPods"`
	StalePods       int     `json:"stalePods"`
	DroppedPods     int     `json:"droppedPods"`
	BypassedPods    int     `json:"bypassedPods"`
	RefusedPods     int     `json:"refusedPods,omitempty"` // answering implausible figures, not counted
	Active          bool    `json:"active"`                // with activationConcurrency 0 and Window
	// Idle says what keeps the app active, under the rate window and
	// activation threshold its ScaledObject last asked with.
	Idle Idleness `json:"idle"`
	// BusyFor is how long requests have been in flight on some pod
	// without a break (the age of the oldest, at most).
	BusyFor string        `json:"busyFor,omitempty"`
	busy    time.Duration // BusyFor, for /metrics
}

func (s *Scaler) appStatuses(now time.Time, window time.Duration) []AppStatus {
	s.reg.mu.RLock()
	apps := make([]*app, 0, len(s.reg.apps))
	for _, a := range s.reg.apps {
		apps = append(apps, a)
	}
	s.reg.mu.RUnlock()
	out := make([]AppStatus, 0, len(apps))
	for _, a := range apps {
		out = append(out, s.appStatus(a.key, a.figures(now, window), now, window))
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].App < out[j].App
	})
	return out
}

func (s *Scaler) appStatus(k appKey, f figures, now time.Time, window time.Duration) AppStatus {
	p := params{app: k, kind: kindRate, window: window}
	f.kept = s.keptUp(k)
	return AppStatus{
		Namespace: k.Namespace, App: k.Name,
		Concurrency: f.concurrency(), InFlight: f.inFlight, Held: f.held,
		RatePerSecond: p.value(f, s.span(now)), Window: window.String(),
		RequestsCounted: f.counted, ColdStarts: f.coldStarts,
		Pods: f.pods, ReadyPods: f.readyPods, StalePods: f.stalePods, DroppedPods: f.droppedPods, BypassedPods: f.bypassedPods,
		RefusedPods: f.refusedPods,
		Active:      p.active(f),
		Idle:        s.idleOf(k, now),
		BusyFor:     busyFor(f),
		busy:        f.busyFor,
	}
}

// idleOf is k's Idleness under what its ScaledObject asked.
func (s *Scaler) idleOf(k appKey, now time.Time) Idleness {
	p, _ := s.asked.get(k, now)
	return idleOf(p, s.figuresOf(p, now))
}

func busyFor(f figures) string {
	if f.busyFor == 0 {
		return ""
	}
	return f.busyFor.Round(time.Millisecond).String()
}
