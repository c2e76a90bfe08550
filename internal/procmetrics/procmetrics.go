package procmetrics

import (
	"errors"
	"fmt"
	"regexp"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// liveHeap is the one runtime/metrics series kept beside the Go
// collector's defaults (GOGC, GOMEMLIMIT, GOMAXPROCS): the bytes of live
// and not yet swept heap objects, what go_memstats_heap_alloc_bytes said.
var liveHeap = regexp.MustCompile(`^/memory/classes/heap/objects:bytes$`)

// Collectors returns the collectors of a process's own series, new ones
// at each call: 24 series (15 go_*, 9 process_*).
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{
		collectors.NewGoCollector(
			collectors.WithGoCollectorMemStatsMetricsDisabled(),
			collectors.WithGoCollectorRuntimeMetrics(collectors.GoRuntimeMetricsRule{Matcher: liveHeap}),
		),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	}
}

// controllerRuntimeGo is the Go collector controller-runtime registers on
// its registry (sigs.k8s.io/controller-runtime/pkg/metrics.Registry) when
// its controller package is initialised: every runtime/metrics series.
func controllerRuntimeGo() prometheus.Collector {
	return collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(collectors.MetricsAll))
}

// ReplaceControllerRuntime puts Collectors in place of the Go and process
// collectors controller-runtime registered on reg, its registry, which
// the webhook and ebb-federation serve. A second call changes nothing. It
// fails when reg holds another Go collector, as it would if
// controller-runtime registered a different one.
func ReplaceControllerRuntime(reg prometheus.Registerer) error {
	reg.Unregister(controllerRuntimeGo())
	for _, c := range Collectors() {
		// controller-runtime's process collector is this one, and so is
		// the Go collector of an earlier call: already registered.
		if err := reg.Register(c); err != nil && !errors.As(err, new(prometheus.AlreadyRegisteredError)) {
			return fmt.Errorf("register the process's metrics in place of controller-runtime's: %w", err)
		}
	}
	return nil
}
