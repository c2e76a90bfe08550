package tracing

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/ebb-dev/ebb/internal/tracing/tracingtest"
)

// TestExportToAReceiver: spans made under a remote parent (a traceparent)
// reach an OTLP/HTTP receiver that decodes them as the specification's
// ExportTraceServiceRequest, with their parentage, times, attributes and
// the resource's service name.
func TestExportToAReceiver(t *testing.T) {
	rcv, err := tracingtest.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer rcv.Close()
	p := New(Options{Endpoint: rcv.URL(), Sampling: 0}, "ebb-test", attribute.String("k8s.pod.name", "p-0"))
	defer p.Shutdown(context.Background())

	tp, traceID, clientSpan := tracingtest.TraceParent()
	ctx := Propagator.Extract(context.Background(), Bytes(tp))
	start := time.Now().Add(-time.Second)
	ctx, parent := p.Tracer.Start(ctx, "parent", trace.WithTimestamp(start), trace.WithAttributes(attribute.Int("http.response.status_code", 200)))
	_, child := p.Tracer.Start(ctx, "child", trace.WithTimestamp(start.Add(100*time.Millisecond)))
	child.End(trace.WithTimestamp(start.Add(300 * time.Millisecond)))
	parent.End(trace.WithTimestamp(start.Add(time.Second)))
	if err := p.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	spans := rcv.Trace(traceID)
	if len(spans) != 2 {
		t.Fatalf("received %d spans of trace %s, want 2: %+v", len(spans), traceID, spans)
	}
	ps, cs := spans[0], spans[1]
	if ps.Name != "parent" || ps.ParentSpanID != clientSpan || cs.Name != "child" || cs.ParentSpanID != ps.SpanID {
		t.Errorf("parentage: %+v", spans)
	}
	if ps.Service != "ebb-test" || ps.Attributes["http.response.status_code"] != "200" {
		t.Errorf("service %q, attributes %v", ps.Service, ps.Attributes)
	}
	if ps.Duration() != time.Second || cs.Duration() != 200*time.Millisecond || !cs.Start.Equal(start.Add(100*time.Millisecond)) {
		t.Errorf("times: parent %v, child %v from %v", ps.Duration(), cs.Duration(), cs.Start)
	}
	if _, bad := rcv.Count(); bad != 0 {
		t.Errorf("%d exports refused by the receiver", bad)
	}

	// Sampling 0 and no parent: nothing is recorded; an unsampled parent
	// is followed too.
	_, s := p.Tracer.Start(context.Background(), "root")
	if s.IsRecording() {
		t.Error("a root span was sampled at --trace-sampling 0")
	}
	s.End()
	unsampled := strings.TrimSuffix(tp, "01") + "00"
	_, s = p.Tracer.Start(Propagator.Extract(context.Background(), Bytes(unsampled)), "x")
	if s.IsRecording() {
		t.Error("a span under a traceparent that says not sampled was sampled")
	}
	s.End()
}

func TestTraceParent(t *testing.T) {
	tp, _, _ := tracingtest.TraceParent()
	sc := trace.SpanContextFromContext(Propagator.Extract(context.Background(), Bytes(tp)))
	if got := string(TraceParent(nil, sc)); got != tp || len(got) != TraceParentLen {
		t.Errorf("TraceParent = %q, want %q", got, tp)
	}
}

func TestOff(t *testing.T) {
	p := New(DefaultOptions(), "ebb-test")
	if p.Tracer != nil {
		t.Error("a tracer with no endpoint")
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Error(err)
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{Endpoint: "collector:4318", Sampling: 0.1}, "--otlp-endpoint"},
		{Options{Endpoint: "ftp://c:1", Sampling: 0.1}, "--otlp-endpoint"},
		{Options{Sampling: 1.5}, "--trace-sampling"},
		{Options{Sampling: -0.1}, "--trace-sampling"},
		{Options{Endpoint: "http://otel-collector.monitoring:4318", Sampling: 1}, ""},
	} {
		err := tc.o.Validate()
		if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want %q", tc.o, err, tc.want)
		}
	}
}
