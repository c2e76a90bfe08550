package sidecar

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gorilla/websocket"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/internal/testwait"
	"github.com/ebb-dev/ebb/internal/tracing/tracingtest"
)

// TestRequestMetrics: the request-duration histogram counts each request
// under its protocol and status class: HTTP/1.1 2xx and 4xx, a 502 of the
// sidecar's own (the app down), an upgrade (a WebSocket, its whole life),
// h2c, and gRPC with the grpc-status the app answered.
func TestRequestMetrics(t *testing.T) {
	app := startTestApp(t)
	r := startSidecar(t, testOptions(app.addr))
	get(t, http.DefaultClient, "http://"+r.addr+"/")
	get(t, http.DefaultClient, "http://"+r.addr+"/status/404")

	ws, _, err := websocket.DefaultDialer.Dial("ws://"+r.addr+"/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	ws.WriteMessage(websocket.TextMessage, []byte("hi"))
	ws.ReadMessage()
	ws.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
	ws.Close()

	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	get(t, &http.Client{Transport: &http.Transport{Protocols: &protos}}, "http://"+r.addr+"/")
	cc, err := grpc.NewClient(r.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	hc := healthpb.NewHealthClient(cc)
	hc.Check(ctx, &healthpb.HealthCheckRequest{})
	hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "nope"})

	down := startSidecar(t, testOptions("127.0.0.1:1"))
	get(t, http.DefaultClient, "http://"+down.addr+"/")

	testwait.For(t, 5*time.Second, "nothing in flight", func() bool { return readStats(t, r).InFlight == 0 })
	// A request is observed once its answer is written, so a client may
	// see the answer first: scrape until the series are there (or 5 s).
	lacking := func(admin string, wants ...string) []string {
		var missing []string
		deadline := time.Now().Add(5 * time.Second)
		for {
			_, body := get(t, http.DefaultClient, "http://"+admin+"/metrics")
			missing = missing[:0]
			for _, want := range wants {
				if !strings.Contains(body, want+"\n") {
					missing = append(missing, want)
				}
			}
			if len(missing) == 0 || time.Now().After(deadline) {
				return missing
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for _, want := range lacking(r.admin,
		`ebb_sidecar_request_duration_seconds_count{code="2xx",protocol="http1"} 1`,
		`ebb_sidecar_request_duration_seconds_count{code="4xx",protocol="http1"} 1`,
		`ebb_sidecar_request_duration_seconds_count{code="1xx",protocol="upgrade"} 1`,
		`ebb_sidecar_request_duration_seconds_count{code="2xx",protocol="h2c"} 1`,
		`ebb_sidecar_request_duration_seconds_count{code="2xx",protocol="grpc"} 2`,
		`ebb_sidecar_grpc_requests_total{grpc_code="OK"} 1`,
		`ebb_sidecar_grpc_requests_total{grpc_code="NotFound"} 1`,
	) {
		t.Errorf("/metrics lacks %s", want)
	}
	for _, want := range lacking(down.admin, `ebb_sidecar_request_duration_seconds_count{code="5xx",protocol="http1"} 1`) {
		t.Errorf("/metrics of a sidecar whose app is down lacks %s", want)
	}

	o := testOptions(app.addr)
	o.RequestMetrics = false
	off := startSidecar(t, o)
	get(t, http.DefaultClient, "http://"+off.addr+"/")
	if _, body := get(t, http.DefaultClient, "http://"+off.admin+"/metrics"); strings.Contains(body, "ebb_sidecar_request_duration_seconds") {
		t.Error("--request-metrics=false still exports the histogram")
	}
}

// TestRequestPathAllocatesNothing: a keep-alive HTTP/1.1 request through
// the sidecar, counted and measured, allocates nothing (the client and the
// app of the test allocate nothing either).
func TestRequestPathAllocatesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("measures allocations over 2000 requests")
	}
	r := startSidecar(t, testOptions(rawUpstream(t, smallResponse)))
	c, err := net.Dial("tcp", r.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	req := []byte("GET / HTTP/1.1\r\nHost: a\r\nUser-Agent: test\r\n\r\n")
	one := func() {
		c.Write(req)
		if code, err := readRaw(br); code != 200 || err != nil {
			t.Fatalf("response %d, %v", code, err)
		}
	}
	for range 100 { // warm the pools
		one()
	}
	if avg := testing.AllocsPerRun(2000, one); avg >= 0.5 {
		t.Errorf("%.2f allocations per request, want 0", avg)
	}
}

// TestTracing: with --otlp-endpoint, a request whose traceparent says
// sampled gets a sidecar span in that trace, child of the client's span,
// and the app receives the sidecar's span as its parent; over HTTP/1.1 and
// h2c. A request without a traceparent at --trace-sampling 0 is not traced
// and reaches the app without one.
func TestTracing(t *testing.T) {
	rcv, err := tracingtest.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer rcv.Close()
	app := startTestApp(t)
	o := testOptions(app.addr)
	o.Tracing.Endpoint, o.Tracing.Sampling = rcv.URL(), 0
	r := startSidecar(t, o)

	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	for name, c := range map[string]*http.Client{"http1": http.DefaultClient, "h2c": {Transport: &http.Transport{Protocols: &protos}}} {
		t.Run(name, func(t *testing.T) {
			tp, traceID, clientSpan := tracingtest.TraceParent()
			code, body := get(t, c, "http://"+r.addr+"/headers", "traceparent", tp)
			if code != 200 {
				t.Fatalf("GET: %d %s", code, body)
			}
			var spans []tracingtest.Span
			testwait.For(t, 10*time.Second, "the sidecar's span at the receiver", func() bool {
				spans = rcv.Trace(traceID)
				return len(spans) > 0
			})
			s := spans[0]
			if len(spans) != 1 || s.Name != "ebb-sidecar" || s.Service != "ebb-sidecar" || s.ParentSpanID != clientSpan || s.Attributes["http.response.status_code"] != "200" {
				t.Errorf("spans %+v, want one ebb-sidecar span, child of %s", spans, clientSpan)
			}
			if want := "traceparent: 00-" + traceID + "-" + s.SpanID + "-01"; !strings.Contains(strings.ToLower(body), want) {
				t.Errorf("the app received headers\n%s\nwant %q", body, want)
			}
		})
	}
	_, body := get(t, http.DefaultClient, "http://"+r.addr+"/headers")
	if strings.Contains(strings.ToLower(body), "traceparent") {
		t.Errorf("an untraced request reached the app with a traceparent:\n%s", body)
	}
}

// TestStatsBusyFor: the stats line reports how long requests have been in
// flight without a break, for the scaler's Idle condition, and 0 once none
// is.
func TestStatsBusyFor(t *testing.T) {
	app := startTestApp(t)
	r := startSidecar(t, testOptions(app.addr))
	if s := readStats(t, r); s.BusyFor != 0 {
		t.Errorf("with nothing in flight: %+v", s)
	}
	ws, _, err := websocket.DefaultDialer.Dial("ws://"+r.addr+"/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if s := readStats(t, r); s.InFlight != 1 || s.BusyFor < 300*time.Millisecond || s.BusyFor > 10*time.Second {
		t.Errorf("with a WebSocket open 300ms: %+v", s)
	}
	ws.Close()
	testwait.For(t, 5*time.Second, "nothing in flight, not busy", func() bool {
		s := readStats(t, r)
		return s.InFlight == 0 && s.BusyFor == 0
	})
}

// TestInstanceLabel: with --instance (the webhook sets EBB_INSTANCE to its
// group suffix) every sidecar series carries ebb_instance, as the scaler's
// and the activators' do, so the dashboard selects one instance's sidecars
// whatever the scrape configuration.
func TestInstanceLabel(t *testing.T) {
	if instanceLabel != groupsuffix.MetricLabel {
		t.Fatalf("instanceLabel %q, groupsuffix.MetricLabel %q", instanceLabel, groupsuffix.MetricLabel)
	}
	app := startTestApp(t)
	o := testOptions(app.addr)
	o.Instance = "team1.example.com"
	r := startSidecar(t, o)
	get(t, http.DefaultClient, "http://"+r.addr+"/")
	// Recorded just after the client has the whole response.
	testwait.For(t, 5*time.Second, "nothing in flight", func() bool { return readStats(t, r).InFlight == 0 })
	_, body := get(t, http.DefaultClient, "http://"+r.admin+"/metrics")
	for _, want := range []string{
		`ebb_sidecar_requests_total{ebb_instance="team1.example.com"} 1`,
		`ebb_sidecar_request_duration_seconds_count{code="2xx",ebb_instance="team1.example.com",protocol="http1"} 1`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestIdleSidecarSeries: an idle sidecar exports at most 40 series (a fleet
// of idle pods is scraped whole), none of them a request series; the first
// request creates the one series of its protocol and status class, and
// nothing else. Before request series were made on first use the idle
// sidecar exported 547.
func TestIdleSidecarSeries(t *testing.T) {
	app := startTestApp(t)
	o := testOptions(app.addr)
	o.Instance = "ebb.dev" // as the webhook injects it
	r := startSidecar(t, o)
	idle := scrapeSeries(t, r)
	if len(idle) > 40 {
		t.Errorf("an idle sidecar exports %d series, want at most 40:\n%s", len(idle), strings.Join(idle, "\n"))
	}
	for _, s := range idle {
		if strings.HasPrefix(s, "ebb_sidecar_request_duration_seconds") || strings.HasPrefix(s, "ebb_sidecar_grpc_requests_total") {
			t.Errorf("an idle sidecar exports %s", s)
		}
	}

	get(t, http.DefaultClient, "http://"+r.addr+"/")
	testwait.For(t, 5*time.Second, "nothing in flight", func() bool { return readStats(t, r).InFlight == 0 })
	var added []string
	seen := map[string]bool{}
	for _, s := range idle {
		seen[s] = true
	}
	for _, s := range scrapeSeries(t, r) {
		if !seen[s] {
			added = append(added, s)
		}
	}
	var want []string
	for _, le := range []string{"0.001", "0.005", "0.025", "0.1", "0.25", "0.5", "1", "2.5", "10", "60", "+Inf"} {
		want = append(want, `ebb_sidecar_request_duration_seconds_bucket{code="2xx",ebb_instance="ebb.dev",protocol="http1",le="`+le+`"}`)
	}
	want = append(want, `ebb_sidecar_request_duration_seconds_sum{code="2xx",ebb_instance="ebb.dev",protocol="http1"}`,
		`ebb_sidecar_request_duration_seconds_count{code="2xx",ebb_instance="ebb.dev",protocol="http1"}`)
	if diff := cmp.Diff(want, added); diff != "" {
		t.Errorf("series added by one GET 200 (-want +got):\n%s", diff)
	}
}

// scrapeSeries returns the series r's /metrics exports, each its name and
// labels (the sample lines without their values).
func scrapeSeries(t *testing.T, r *running) []string {
	t.Helper()
	_, body := get(t, http.DefaultClient, "http://"+r.admin+"/metrics")
	var series []string
	for _, l := range strings.Split(body, "\n") {
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		series = append(series, l[:strings.LastIndexByte(l, ' ')])
	}
	return series
}
