package proxy

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ebb-dev/ebb/internal/routing"
)

func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// fleetRoutes are n apps at zero as the routing table gets them: a host,
// a Service and its ClusterIP, a Deployment, in 20 namespaces.
func fleetRoutes(n int) []routing.Route[AppConfig] {
	out := make([]routing.Route[AppConfig], n)
	for i := range out {
		name, ns := fmt.Sprintf("app-%04d", i), fmt.Sprintf("team-%02d", i%20)
		out[i] = routing.Route[AppConfig]{Key: routing.Key{Namespace: ns, Name: name}, Generation: 1, Created: time.Unix(int64(i), 0),
			Hosts: []string{name + ".example.com"}, Service: name, ClusterIPs: []string{fmt.Sprintf("10.96.%d.%d", i/250, i%250+1)},
			Value: AppConfig{Deployment: name}}
	}
	return out
}

// TestRouterBytesPerApp: what a replica's request path holds per app at
// zero (its routing-table entries, by host, Service name and ClusterIP,
// and its per-app state), and that an app never held exports no series:
// its held gauge and cold-start phase histograms appear with its first
// hold and first cold start. They were made with the app: 7 histograms
// of 15 buckets and a gauge, 127 series and 12.9 KB per app at zero.
func TestRouterBytesPerApp(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector inflates the heap")
	}
	const n = 1000
	routes := fleetRoutes(n)
	reg := prometheus.NewRegistry()
	rt := NewRouter(RouterOptions{Metrics: NewMetrics(reg)})
	before := liveHeap()
	rt.SetRoutes(routes, nil)
	per := (int64(liveHeap()) - int64(before)) / n
	runtime.KeepAlive(rt)
	series := 0
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "app" {
					series++
					if h := m.GetHistogram(); h != nil {
						series += len(h.GetBucket()) + 2 // +Inf, _sum and _count
					}
					break
				}
			}
		}
	}
	t.Logf("the request path per app at zero: %d bytes, %d series in all for %d apps", per, series, n)
	if series != 0 {
		t.Errorf("%d apps never held export %d series, want none", n, series)
	}
	const bound = 3 << 10
	if per > bound {
		t.Errorf("%d bytes per app, want under %d", per, bound)
	}
}
