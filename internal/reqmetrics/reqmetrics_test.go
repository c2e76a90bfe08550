package reqmetrics

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

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
	if n := testutil.CollectAndCount(reg, Sidecar.GRPC); n != 18 {
		t.Errorf("%d gRPC series, want the 17 codes and unknown", n)
	}
}
