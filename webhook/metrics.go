package webhook

import (
	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Admission results, the values of the result label.
const (
	resultInjected  = "injected"
	resultUnchanged = "unchanged"
	resultRefused   = "refused"
	resultError     = "error"
)

var (
	admissionDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "ebb_webhook_admission_duration_seconds",
		Help:    "Time the webhook took to answer a pod admission, by result (injected, unchanged, refused, error).",
		Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1},
	}, []string{"result"})
	routeApplies = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ebb_webhook_approute_applies_total",
		Help: "AppRoute server-side applies, by result (applied, unchanged, failed).",
	}, []string{"result"})
	certExpiry = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "ebb_webhook_certificate_expiry_timestamp_seconds",
		Help: "When the self-signed serving certificate expires (Unix seconds); 0 in files mode.",
	})
)

func init() {
	ctrlmetrics.Registry.MustRegister(admissionDuration, routeApplies, certExpiry)
}
