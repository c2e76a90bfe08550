package procmetrics

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	_ "sigs.k8s.io/controller-runtime/pkg/controller" // registers controller-runtime's Go and process collectors
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// runtimeSeries returns the series of g's go_* and process_* families by
// family, as a scrape counts them (a summary: its quantiles, _sum and
// _count).
func runtimeSeries(t *testing.T, g prometheus.Gatherer) map[string]int {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "go_") && !strings.HasPrefix(mf.GetName(), "process_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			n := 1
			switch {
			case m.GetHistogram() != nil:
				n = len(m.GetHistogram().GetBucket()) + 3
			case m.GetSummary() != nil:
				n = len(m.GetSummary().GetQuantile()) + 2
			}
			out[mf.GetName()] += n
		}
	}
	return out
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// want is what every ebb binary exports of its process: 24 series.
var want = map[string]int{
	"go_gc_duration_seconds":               7,
	"go_gc_gogc_percent":                   1,
	"go_gc_gomemlimit_bytes":               1,
	"go_goroutines":                        1,
	"go_info":                              1,
	"go_memory_classes_heap_objects_bytes": 1,
	"go_memstats_last_gc_time_seconds":     1,
	"go_sched_gomaxprocs_threads":          1,
	"go_threads":                           1,
	"process_cpu_seconds_total":            1,
	"process_max_fds":                      1,
	"process_network_receive_bytes_total":  1,
	"process_network_transmit_bytes_total": 1,
	"process_open_fds":                     1,
	"process_resident_memory_bytes":        1,
	"process_start_time_seconds":           1,
	"process_virtual_memory_bytes":         1,
	"process_virtual_memory_max_bytes":     1,
}

// TestSeries: Collectors export the 24 series above, no go_memstats_*
// gauge but the last GC's time (the Go collector's default had 35 go_*).
func TestSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(Collectors()...)
	got := runtimeSeries(t, reg)
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("series by family (-want +got):\n%s", d)
	}
	t.Logf("%d series", sum(got))
}

// TestReplaceControllerRuntime: the registry controller-runtime's
// managers serve (the webhook's and ebb-federation's /metrics) exports
// the same 24 series as the other binaries once Replace has run, and
// again after a second call; it held 234 (every runtime/metrics series).
func TestReplaceControllerRuntime(t *testing.T) {
	before := sum(runtimeSeries(t, ctrlmetrics.Registry))
	for i := range 2 {
		if err := ReplaceControllerRuntime(ctrlmetrics.Registry); err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
		if d := cmp.Diff(want, runtimeSeries(t, ctrlmetrics.Registry)); d != "" {
			t.Errorf("after call %d, series by family (-want +got):\n%s", i+1, d)
		}
	}
	t.Logf("controller-runtime's registry: %d go_* and process_* series before, %d after", before, sum(want))
}

// TestReplaceRefusesAnotherGoCollector: a Go collector other than
// controller-runtime's stays, and Replace says so, rather than leaving two
// sets of go_* series or one it did not choose.
func TestReplaceRefusesAnotherGoCollector(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector())
	if err := ReplaceControllerRuntime(reg); err == nil {
		t.Error("Replace over the default Go collector: no error")
	}
}
