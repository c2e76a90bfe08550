package proxy

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ebb-dev/ebb/internal/procmetrics"
	"github.com/ebb-dev/ebb/internal/reqmetrics"
	"github.com/ebb-dev/ebb/internal/routing"
)

// series counts the series reg exports as a scrape shows them (a
// histogram: one per bucket, +Inf, _sum and _count), in all and by the
// app ("namespace/app") they carry.
func series(t *testing.T, reg prometheus.Gatherer) (total int, perApp map[string]int) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	perApp = map[string]int{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			n := 1
			switch {
			case m.GetHistogram() != nil:
				n = len(m.GetHistogram().GetBucket()) + 3
			case m.GetSummary() != nil:
				n = len(m.GetSummary().GetQuantile()) + 2
			}
			total += n
			var ns, app string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "namespace":
					ns = l.GetValue()
				case "app":
					app = l.GetValue()
				}
			}
			if app != "" {
				perApp[ns+"/"+app] += n
			}
		}
	}
	return total, perApp
}

// activatorRegistry is a registry holding what an activator's /metrics
// shows of its process and its request path, as activator.Run registers
// them (the control loops add one gauge).
func activatorRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(procmetrics.Collectors()...)
	reqmetrics.New(reg, reqmetrics.Activator)
	return reg
}

// TestIdleFleetSeries: an activator routing 1,000 apps at zero exports no
// series for any of them, and what it exports in all is bounded whatever
// the size of the fleet: 32 (24 of the process, procmetrics'; 52 with
// the Go collector's go_memstats_* gauges). Each routed app had a held
// gauge and 7 cold-start phase histograms of 15 buckets from its route
// on: 127 series per app and replica, 127,000 here.
func TestIdleFleetSeries(t *testing.T) {
	reg := activatorRegistry()
	rt := NewRouter(RouterOptions{Metrics: NewMetrics(reg)})
	defer rt.Close()
	rt.SetRoutes(fleetRoutes(1000), nil)
	total, perApp := series(t, reg)
	t.Logf("1,000 routed apps at zero: %d series, %d of them for %d apps", total, sumValues(perApp), len(perApp))
	if len(perApp) != 0 {
		t.Errorf("%d apps never held export %d series, want none", len(perApp), sumValues(perApp))
	}
	const bound = 40
	if total > bound {
		t.Errorf("%d series in all, want at most %d", total, bound)
	}
}

func sumValues(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// wokenSeries is what an app exports once it has been woken: its held
// gauge, and 13 series (10 buckets, +Inf, _sum, _count) for its
// cold-start histogram. It was 105, with its own 7 phase histograms.
const wokenSeries = 1 + 13

// phaseSeries is the phase histogram of every app together, once some app
// has been woken: 13 series for each of the 8 phases (Dependencies the
// 8th, 0 for an app without wakes).
const phaseSeries = 13 * 8

// TestWokenAppSeries: an app's series appear with its first hold and its
// first cold start, only for it, 14 of them, and go when its AppRoute
// leaves the routing table — idle, warm (its pods still listed), or
// holding a request (parked in the engine, or in a handler for h2c) at
// the time — and what follows does not make them again; a route that
// comes back gets them again with its next cold start. A woken app's
// series stayed when it left the table with pods or a request in a
// handler.
func TestWokenAppSeries(t *testing.T) {
	for _, tc := range []struct {
		name string
		// h2c: the request held when the route goes is an h2c one.
		h2c bool
		// leave takes the woken app's route away, the app in the state
		// the case names.
		leave func(t *testing.T, rt *Router, url string, others []routing.Route[AppConfig])
	}{
		{"idle", false, func(t *testing.T, rt *Router, url string, others []routing.Route[AppConfig]) {
			rt.SetEndpoints(shopHello, nil)
			rt.SetRoutes(others, nil)
		}},
		{"warm", false, func(t *testing.T, rt *Router, url string, others []routing.Route[AppConfig]) {
			rt.SetRoutes(others, nil)
		}},
		{"holding in the engine", false, holdWhileRouteGoes(http.DefaultClient)},
		{"holding in a handler", true, holdWhileRouteGoes(h2cClient(t))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			rt, url, _ := rigProtocols(t, RouterOptions{Metrics: NewMetrics(reg)}, AppConfig{}, tc.h2c)
			hello := routing.Route[AppConfig]{Key: shopHello, Hosts: []string{"hello.test"}}
			others := fleetRoutes(10)
			rt.SetRoutes(append([]routing.Route[AppConfig]{hello}, others...), nil)
			if _, perApp := series(t, reg); len(perApp) != 0 {
				t.Fatalf("before any request: %v, want no app's series", perApp)
			}

			wake(t, rt, reg, url)
			_, perApp := series(t, reg)
			if d := cmp.Diff(map[string]int{"shop/hello": wokenSeries}, perApp); d != "" {
				t.Errorf("series by app after one cold start (-want +got):\n%s", d)
			}

			tc.leave(t, rt, url, others)
			rt.SetEndpoints(shopHello, nil) // its pods go after it
			if _, perApp := series(t, reg); len(perApp) != 0 {
				t.Errorf("once its route is gone: %v, want no app's series", perApp)
			}

			rt.SetRoutes(append([]routing.Route[AppConfig]{hello}, others...), nil)
			if _, perApp := series(t, reg); len(perApp) != 0 {
				t.Errorf("its route back, before a request: %v, want no app's series", perApp)
			}
			wake(t, rt, reg, url)
			_, perApp = series(t, reg)
			if d := cmp.Diff(map[string]int{"shop/hello": wokenSeries}, perApp); d != "" {
				t.Errorf("series by app after the next cold start (-want +got):\n%s", d)
			}
		})
	}
}

// holdWhileRouteGoes sends through cl a request that is held (the app's
// pods gone), takes the app's route away, and checks the request is
// answered 503.
func holdWhileRouteGoes(cl *http.Client) func(t *testing.T, rt *Router, url string, others []routing.Route[AppConfig]) {
	return func(t *testing.T, rt *Router, url string, others []routing.Route[AppConfig]) {
		rt.SetEndpoints(shopHello, nil)
		done := make(chan int, 1)
		go func() {
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
			req.Host = "hello.test"
			resp, err := cl.Do(req)
			if err != nil {
				done <- 0
				return
			}
			resp.Body.Close()
			done <- resp.StatusCode
		}()
		waitHeld(t, rt, 1)
		rt.SetRoutes(others, nil)
		if code := <-done; code != http.StatusServiceUnavailable {
			t.Errorf("a request held when its route went: %d, want 503", code)
		}
		waitHeld(t, rt, 0)
	}
}

// h2cClient is a client speaking h2c only.
func h2cClient(t *testing.T) *http.Client {
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// wake wakes shop/hello with a request held until its pod is ready,
// which it leaves ready.
func wake(t *testing.T, rt *Router, reg prometheus.Gatherer, url string) {
	t.Helper()
	before := phaseCount(t, reg)
	done := make(chan int, 1)
	go func() { code, _, _ := do(t, t.Context(), url, "hello.test"); done <- code }()
	waitHeld(t, rt, 1)
	rt.SetEndpoints(shopHello, []Endpoint{{Addr: testApp(t, "a"), Ready: true}})
	if code := <-done; code != 200 {
		t.Fatalf("held request: %d", code)
	}
	// The phases are observed once the first byte is forwarded, just
	// before the client has it.
	deadline := time.Now().Add(5 * time.Second)
	for phaseCount(t, reg) < before+1 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
}

// phaseCount returns the cold starts the phase histogram of reg counts
// (its FirstByte series' _count).
func phaseCount(t *testing.T, reg prometheus.Gatherer) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != metricColdStartPhase {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "phase" && l.GetValue() == "FirstByte" {
					return m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return 0
}

// TestPhaseSeriesFleetWide: the phase histogram is one for every app,
// labelled by phase alone: its 104 series appear with the first cold
// start, and neither a second app's cold start nor a route leaving the
// table changes them; each cold start is counted once per phase. Each
// app that had been woken exported 91 of its own (7 phases then).
func TestPhaseSeriesFleetWide(t *testing.T) {
	reg := prometheus.NewRegistry()
	rt, url, _ := rigProtocols(t, RouterOptions{Metrics: NewMetrics(reg)}, AppConfig{}, false)
	hello := routing.Route[AppConfig]{Key: shopHello, Hosts: []string{"hello.test"}}
	others := fleetRoutes(10)
	rt.SetRoutes(append([]routing.Route[AppConfig]{hello}, others...), nil)
	if got := phaseSeriesLabels(t, reg); len(got) != 0 {
		t.Fatalf("before any cold start: phase series %v, want none", got)
	}

	wake(t, rt, reg, url)
	rt.SetEndpoints(shopHello, nil)
	wake(t, rt, reg, url)
	if got := phaseCount(t, reg); got != 2 {
		t.Errorf("two cold starts: the phase histogram counts %d, want 2", got)
	}
	want := map[string]int{}
	for _, p := range PhaseNames {
		want["phase="+p] = phaseSeries / len(PhaseNames)
	}
	if d := cmp.Diff(want, phaseSeriesLabels(t, reg)); d != "" {
		t.Errorf("phase series by labels (-want +got):\n%s", d)
	}
	_, perApp := series(t, reg)
	if d := cmp.Diff(map[string]int{"shop/hello": wokenSeries}, perApp); d != "" {
		t.Errorf("series by app after two cold starts (-want +got):\n%s", d)
	}

	rt.SetRoutes(others, nil)
	rt.SetEndpoints(shopHello, nil)
	if d := cmp.Diff(want, phaseSeriesLabels(t, reg)); d != "" {
		t.Errorf("its route gone, phase series by labels (-want +got):\n%s", d)
	}
	if _, perApp := series(t, reg); len(perApp) != 0 {
		t.Errorf("its route gone: %v, want no app's series", perApp)
	}
}

// phaseSeriesLabels returns the series of the phase histogram in reg, by
// their labels ("name=value,..."), as a scrape counts them.
func phaseSeriesLabels(t *testing.T, reg prometheus.Gatherer) map[string]int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, mf := range mfs {
		if mf.GetName() != metricColdStartPhase {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			out[strings.Join(labels, ",")] += len(m.GetHistogram().GetBucket()) + 3
		}
	}
	return out
}

// TestHoldingAllocatesNothing: once an app's series exist, a request
// held, released, refused or timed out costs its metrics no allocation.
func TestHoldingAllocatesNothing(t *testing.T) {
	rt := NewRouter(RouterOptions{Metrics: NewMetrics(prometheus.NewRegistry())})
	defer rt.Close()
	rt.SetRoutes([]routing.Route[AppConfig]{{Key: shopHello, Hosts: []string{"hello.test"}}}, nil)
	rt.mu.Lock()
	a := rt.apps[shopHello]
	rt.mu.Unlock()
	m := rt.opts.Metrics
	// The first hold makes the app's series and begins its cold start;
	// it stays held, so that the requests below join that cold start.
	if got := rt.admit(a, 100, time.Now()); got != admitted {
		t.Fatalf("first hold: %v", got)
	}
	defer rt.leave(a)
	m.countRejected(a)
	m.countTimeout(a)
	now := time.Now()
	allocs := testing.AllocsPerRun(1000, func() {
		rt.admit(a, 100, now)
		rt.leave(a)
		m.countRejected(a)
		m.countTimeout(a)
	})
	if allocs != 0 {
		t.Errorf("%v allocations per request, want 0", allocs)
	}
}
