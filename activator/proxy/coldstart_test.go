package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/otel/trace"

	"github.com/ebb-dev/ebb/internal/reqmetrics"
	"github.com/ebb-dev/ebb/internal/testwait"
	"github.com/ebb-dev/ebb/internal/tracing"
	"github.com/ebb-dev/ebb/internal/tracing/tracingtest"
)

func TestMarksResolve(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	for name, tc := range map[string]struct {
		seen map[int]int // mark: ms after t0
		want [nMarks - 1]int
	}{
		"every mark, in order": {
			map[int]int{markHeld: 0, markTold: 2, markScaled: 30, markCreated: 35, markScheduled: 40, markStarted: 140, markReady: 190, markFirstByte: 200},
			[nMarks - 1]int{2, 28, 5, 5, 100, 50, 0, 10}},
		"marks not seen last 0": {
			map[int]int{markHeld: 0, markTold: 2, markStarted: 140, markReady: 190, markFirstByte: 200},
			[nMarks - 1]int{2, 138, 0, 0, 0, 50, 0, 10}},
		"a mark seen late (watch lag) does not go past the next": {
			map[int]int{markHeld: 0, markTold: 2, markScaled: 60, markCreated: 35, markScheduled: 40, markStarted: 140, markReady: 190, markFirstByte: 200},
			[nMarks - 1]int{2, 33, 0, 5, 100, 50, 0, 10}},
		"a mark seen after the first byte": {
			map[int]int{markHeld: 0, markTold: 2, markStarted: 400, markReady: 190, markFirstByte: 200},
			[nMarks - 1]int{2, 188, 0, 0, 0, 0, 0, 10}},
		"dependencies up after the app": {
			map[int]int{markHeld: 0, markTold: 2, markStarted: 140, markReady: 150, markDeps: 190, markFirstByte: 200},
			[nMarks - 1]int{2, 138, 0, 0, 0, 10, 40, 10}},
		"dependencies up before the app": {
			map[int]int{markHeld: 0, markTold: 2, markStarted: 140, markDeps: 100, markReady: 190, markFirstByte: 200},
			[nMarks - 1]int{2, 138, 0, 0, 0, 50, 0, 10}},
	} {
		t.Run(name, func(t *testing.T) {
			var m marks
			for i, ms := range tc.seen {
				m[i] = at(ms)
			}
			got := m.resolve().phases(t0)
			var total time.Duration
			for i, d := range got {
				total += d
				if want := time.Duration(tc.want[i]) * time.Millisecond; d != want {
					t.Errorf("%s = %v, want %v", PhaseNames[i], d, want)
				}
			}
			if total != 200*time.Millisecond {
				t.Errorf("the phases add up to %v, want the 200ms from held to first byte", total)
			}
		})
	}
}

// stepWatcher stands in for the API server's watch events: it reports the
// Deployment scaled, a pod created, scheduled and started, one after the
// other, step apart.
type stepWatcher struct{ step time.Duration }

func (w stepWatcher) Watch(ctx context.Context, _, _, deployment string, _ time.Time, mark func(int, time.Time)) {
	go func() {
		for _, i := range []int{markScaled, markCreated, markScheduled, markStarted} {
			select {
			case <-ctx.Done():
				return
			case <-time.After(w.step):
				mark(i, time.Now())
			}
		}
	}()
}

// TestColdStartPhasesAndTrace: a request held through a cold start is
// recorded phase by phase (histogram, OnColdStart), the phases add up to
// the time it was held until its first response byte, its trace has an
// activator span continuing the client's, with a child span per phase, and
// the app receives the activator's span as its parent.
func TestColdStartPhasesAndTrace(t *testing.T) {
	rcv, tp := tracedActivator(t)
	reg := prometheus.NewRegistry()
	var mu sync.Mutex
	var records []ColdStartRecord
	rt, url, _ := rig(t, RouterOptions{
		Metrics: NewMetrics(reg), Requests: reqmetrics.New(reg, reqmetrics.Activator), Tracer: tp.Tracer,
		Watcher: stepWatcher{step: 20 * time.Millisecond},
		OnColdStart: func(r ColdStartRecord) {
			mu.Lock()
			records = append(records, r)
			mu.Unlock()
		},
	}, AppConfig{Deployment: "hello"})
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, r.Header.Get("Traceparent"))
	}))
	defer app.Close()

	clientTP, traceID, clientSpan := tracingtest.TraceParent()
	type answer struct {
		code int
		body string
		took time.Duration
	}
	done := make(chan answer, 1)
	start := time.Now()
	go func() {
		code, _, body := do(t, t.Context(), url, "hello.test", "traceparent", clientTP)
		done <- answer{code, body, time.Since(start)}
	}()
	waitHeld(t, rt, 1)
	rt.ScalerTold("shop", "hello", 1, time.Now())
	time.Sleep(100 * time.Millisecond) // the four watch steps
	rt.SetEndpoints(shopHello, []Endpoint{{Addr: strings.TrimPrefix(app.URL, "http://"), Ready: true}})
	a := <-done
	if a.code != 200 {
		t.Fatalf("held request: %d %q", a.code, a.body)
	}

	testwait.For(t, 5*time.Second, "the cold start recorded", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(records) == 1
	})
	rec := records[0]
	if rec.Namespace != "shop" || rec.App != "hello" || rec.Total() > a.took || rec.Total() < a.took*8/10 {
		t.Errorf("record %+v (total %v), want shop/hello and a total close to the %v the client waited", rec, rec.Total(), a.took)
	}
	for i, d := range rec.Phases {
		if i < 5 && d == 0 || d < 0 {
			t.Errorf("phase %s lasted %v", PhaseNames[i], d)
		}
	}
	if got := testutil.CollectAndCount(reg, metricColdStartPhase); got != len(PhaseNames) {
		t.Errorf("%d series of %s, want one per phase", got, metricColdStartPhase)
	}

	// The hold span ends with the exchange, which the engine finishes
	// after the client has the last byte of its response.
	var spans []tracingtest.Span
	testwait.For(t, 5*time.Second, "the hold span and its phases exported", func() bool {
		if err := tp.ForceFlush(context.Background()); err != nil {
			t.Fatal(err)
		}
		spans = rcv.Trace(traceID)
		return len(spans) >= 1+len(PhaseNames)
	})
	if len(spans) != 1+len(PhaseNames) {
		t.Fatalf("%d spans in the trace, want the hold span and %d phases: %+v", len(spans), len(PhaseNames), spans)
	}
	var hold tracingtest.Span
	var phases []tracingtest.Span
	for _, s := range spans {
		if s.Name == "ebb-activator hold" {
			hold = s
		} else {
			phases = append(phases, s)
		}
	}
	if hold.Name != "ebb-activator hold" || hold.ParentSpanID != clientSpan || hold.Attributes["http.response.status_code"] != "200" {
		t.Errorf("hold span %+v, want a child of the client's span %s", hold, clientSpan)
	}
	if want := "00-" + traceID + "-" + hold.SpanID + "-01"; a.body != want {
		t.Errorf("the app got traceparent %q, want the activator's span %q", a.body, want)
	}
	var sum time.Duration
	for i, s := range phases {
		if s.Name != PhaseNames[i] || s.ParentSpanID != hold.SpanID {
			t.Errorf("span %d: %s child of %s, want %s child of the hold span", i, s.Name, s.ParentSpanID, PhaseNames[i])
		}
		sum += s.Duration()
	}
	// The request's wait began with the cold start; spans carry wall-clock
	// times, the record monotonic ones: a few ns apart.
	if d := rec.Total() - sum; d < -time.Microsecond || d > time.Millisecond {
		t.Errorf("the phase spans add up to %v, the record to %v", sum, rec.Total())
	}
}

// TestForwardedRequestsMeasured: warm and released requests are in the
// activator's request-duration histogram under their status class.
func TestForwardedRequestsMeasured(t *testing.T) {
	reg := prometheus.NewRegistry()
	rt, url, _ := rig(t, RouterOptions{Metrics: NewMetrics(reg), Requests: reqmetrics.New(reg, reqmetrics.Activator)}, AppConfig{})
	done := make(chan int, 1)
	go func() { code, _, _ := do(t, t.Context(), url, "hello.test"); done <- code }()
	waitHeld(t, rt, 1)
	rt.SetEndpoints(shopHello, []Endpoint{{Addr: testApp(t, "a"), Ready: true}})
	if code := <-done; code != 200 {
		t.Fatalf("released: %d", code)
	}
	do(t, t.Context(), url, "hello.test")
	do(t, t.Context(), url+"/%41", "hello.test") // an escaped target
	c := dialRaw(t, url)                         // absolute form: the net/http path
	io.WriteString(c, "GET http://hello.test/ HTTP/1.1\r\nHost: hello.test\r\n\r\n")
	if got := readAnswers(t, c, 1); got[0].Code != 200 {
		t.Fatalf("absolute form: %+v", got[0])
	}
	// Each is recorded just after its client has the whole response.
	var n uint64
	testwait.For(t, 5*time.Second, "four requests recorded", func() bool {
		n = forwarded(t, reg)
		return n >= 4
	})
	if n != 4 {
		t.Errorf("%d requests in the histogram under http1/2xx, want 4 (one released, three warm)", n)
	}
}

// forwarded is the count of http1/2xx requests in the activator's
// request-duration histogram.
func forwarded(t *testing.T, reg *prometheus.Registry) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "ebb_activator_request_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["code"] == "2xx" && labels["protocol"] == "http1" {
				return m.GetHistogram().GetSampleCount()
			}
		}
	}
	return 0
}

// tracedActivator starts an OTLP receiver and a tracer provider exporting
// to it as the activator, both stopped when the test ends.
func tracedActivator(t *testing.T) (*tracingtest.Receiver, *tracing.Provider) {
	t.Helper()
	rcv, err := tracingtest.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rcv.Close)
	tp := tracing.New(tracing.Options{Endpoint: rcv.URL()}, "ebb-activator")
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	return rcv, tp
}

// TestTraceHeldLateJoiner: a request held after some phases of its cold
// start had ended (here the scaler was told before the request's own hold
// time was taken) still gets a span for every phase, those before its
// wait lasting 0, and the spans add up to its wait. Regression: phases
// that ended before the request's hold were left out of its trace.
func TestTraceHeldLateJoiner(t *testing.T) {
	rcv, tp := tracedActivator(t)
	d := NewRouter(RouterOptions{Tracer: tp.Tracer})
	defer d.Close()

	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	var m marks
	for i, ms := range []int{0, 1, 30, 35, 40, 140, 190} {
		m[i] = at(ms)
	}
	clientTP, traceID, _ := tracingtest.TraceParent()
	ctx := tracing.Propagator.Extract(context.Background(), tracing.Bytes(clientTP))
	_, span := tp.Tracer.Start(ctx, "ebb-activator hold", trace.WithTimestamp(at(2)))
	d.traceHeld(span, m, true, at(2), at(200))
	span.End(trace.WithTimestamp(at(200)))
	if err := tp.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	byName := map[string]tracingtest.Span{}
	for _, s := range rcv.Trace(traceID) {
		byName[s.Name] = s
	}
	var sum time.Duration
	for _, name := range PhaseNames {
		s, ok := byName[name]
		if !ok {
			t.Errorf("no %s span", name)
		}
		sum += s.Duration()
	}
	if s := byName[PhaseNames[0]]; s.Duration() != 0 {
		t.Errorf("%s lasted %v within the request's wait, want 0", s.Name, s.Duration())
	}
	if sum != 198*time.Millisecond {
		t.Errorf("the phase spans add up to %v, want the request's 198ms wait", sum)
	}
}
