package reqmetrics

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestWriterKeepsTheFinalCode(t *testing.T) {
	heads := 0
	rec := httptest.NewRecorder()
	w := &Writer{ResponseWriter: rec, OnHead: func() { heads++ }}
	w.WriteHeader(http.StatusEarlyHints)
	if w.Code != 0 || heads != 0 {
		t.Errorf("after a 103: code %d, heads %d", w.Code, heads)
	}
	w.WriteHeader(http.StatusTeapot)
	w.Write([]byte("x"))
	if w.Code != http.StatusTeapot || heads != 1 {
		t.Errorf("code %d, heads %d; want 418 once", w.Code, heads)
	}

	w = &Writer{ResponseWriter: httptest.NewRecorder()}
	w.Write([]byte("x"))
	if w.Code != http.StatusOK {
		t.Errorf("a Write with no WriteHeader: code %d, want 200", w.Code)
	}

	rec = httptest.NewRecorder()
	w = &Writer{ResponseWriter: rec}
	rec.Header().Set(http.TrailerPrefix+"Grpc-Status", "5")
	if got := w.GRPCStatus(); got != "5" {
		t.Errorf("GRPCStatus from an unannounced trailer = %q", got)
	}
}

func TestObserveClasses(t *testing.T) {
	reg := prometheus.NewRegistry()
	r := New(reg, Sidecar)
	start := time.Now()
	for _, code := range []int{0, 101, 200, 204, 302, 404, 502, 999} {
		r.Observe(HTTP1, code, start)
	}
	r.ObserveGRPC("0")
	r.ObserveGRPC("16")
	r.ObserveGRPC("17")
	r.ObserveGRPC("")
	var nilRec *Recorder
	nilRec.Observe(HTTP1, 200, start) // off: no panic
	nilRec.ObserveGRPC("0")

	want := map[string]uint64{"none": 2, "1xx": 1, "2xx": 2, "3xx": 1, "4xx": 1, "5xx": 1}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != Sidecar.Duration {
			continue
		}
		for _, m := range mf.GetMetric() {
			var code, proto string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "code":
					code = l.GetValue()
				case "protocol":
					proto = l.GetValue()
				}
			}
			if proto == "http1" && m.GetHistogram().GetSampleCount() != want[code] {
				t.Errorf("code=%s: %d, want %d", code, m.GetHistogram().GetSampleCount(), want[code])
			}
		}
	}
	if n := testutil.CollectAndCount(reg, Sidecar.GRPC); n != 3 {
		t.Errorf("%d gRPC series, want the 3 seen (OK, Unauthenticated, unknown)", n)
	}
}

// TestSeriesOnFirstUse: a Recorder exports no series until a request is
// recorded, then exactly the label combinations it has seen.
func TestSeriesOnFirstUse(t *testing.T) {
	reg := prometheus.NewRegistry()
	r := New(reg, Activator)
	if n := testutil.CollectAndCount(reg); n != 0 {
		t.Fatalf("%d series before any request, want 0", n)
	}
	r.Observe(HTTP1, 200, time.Now())
	r.Observe(HTTP1, 204, time.Now())
	r.Observe(GRPC, 200, time.Now())
	r.ObserveGRPC("0")
	want := `
# HELP ebb_activator_grpc_requests_total gRPC requests forwarded, by the grpc-status the app answered with (unknown: none or not a known code).
# TYPE ebb_activator_grpc_requests_total counter
ebb_activator_grpc_requests_total{grpc_code="OK"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), Activator.GRPC); err != nil {
		t.Error(err)
	}
	got := map[string]uint64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != Activator.Duration {
			continue
		}
		for _, m := range mf.GetMetric() {
			key := ""
			for _, l := range m.GetLabel() {
				key += l.GetName() + "=" + l.GetValue() + " "
			}
			got[key] = m.GetHistogram().GetSampleCount()
			if n := len(m.GetHistogram().GetBucket()); n != len(Buckets) {
				t.Errorf("%s: %d buckets, want %d", key, n, len(Buckets))
			}
		}
	}
	if diff := cmp.Diff(map[string]uint64{"code=2xx protocol=http1 ": 2, "code=2xx protocol=grpc ": 1}, got); diff != "" {
		t.Errorf("histogram series (-want +got):\n%s", diff)
	}
}

// TestObserveAllocatesNothing: once a label combination has been seen,
// recording another request of it allocates nothing.
func TestObserveAllocatesNothing(t *testing.T) {
	r := New(prometheus.NewRegistry(), Sidecar)
	start := time.Now()
	r.Observe(HTTP1, 200, start)
	r.ObserveGRPC("5")
	if n := testing.AllocsPerRun(1000, func() { r.Observe(HTTP1, 200, start) }); n != 0 {
		t.Errorf("Observe: %.1f allocations, want 0", n)
	}
	if n := testing.AllocsPerRun(1000, func() { r.ObserveGRPC("5") }); n != 0 {
		t.Errorf("ObserveGRPC: %.1f allocations, want 0", n)
	}
}

// BenchmarkObserve is one recorded request of a combination already seen,
// from every CPU at once.
func BenchmarkObserve(b *testing.B) {
	r := New(prometheus.NewRegistry(), Sidecar)
	start := time.Now()
	r.Observe(HTTP1, 200, start)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r.Observe(HTTP1, 200, start)
		}
	})
}

// TestFirstUseFromManyGoroutines: requests of a combination not yet seen,
// recorded at once from many goroutines, make one series that counts
// every one of them (run it with -race).
func TestFirstUseFromManyGoroutines(t *testing.T) {
	reg := prometheus.NewRegistry()
	r := New(reg, Sidecar)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 100 {
				r.Observe(H2C, 503, time.Now())
				r.ObserveGRPC("14")
			}
		})
	}
	wg.Wait()
	want := `
# HELP ebb_sidecar_grpc_requests_total gRPC requests forwarded, by the grpc-status the app answered with (unknown: none or not a known code).
# TYPE ebb_sidecar_grpc_requests_total counter
ebb_sidecar_grpc_requests_total{grpc_code="Unavailable"} 1600
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), Sidecar.GRPC); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(reg, Sidecar.Duration); n != 1 {
		t.Errorf("%d histogram series, want 1", n)
	}
}
