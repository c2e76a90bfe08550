package proxy

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ebb-dev/ebb/internal/holdpush"
	"github.com/ebb-dev/ebb/internal/routing"
	"github.com/ebb-dev/ebb/internal/testwait"
)

// keyedPusher is a Pusher that keeps every value pushed, by app.
type keyedPusher struct {
	mu   sync.Mutex
	seen map[routing.Key][]int64
}

func (p *keyedPusher) Set(a holdpush.App, n int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.seen == nil {
		p.seen = map[routing.Key][]int64{}
	}
	k := routing.Key{Namespace: a.Namespace, Name: a.Name}
	p.seen[k] = append(p.seen[k], n)
}

// last is the last count pushed for k, 0 if none.
func (p *keyedPusher) last(k routing.Key) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if v := p.seen[k]; len(v) > 0 {
		return v[len(v)-1]
	}
	return 0
}

func (p *keyedPusher) values(k routing.Key) []int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]int64(nil), p.seen[k]...)
}

var (
	shopAPI = routing.Key{Namespace: "shop", Name: "api"}
	dataDB  = routing.Key{Namespace: "data", Name: "db"}
)

// depsRig is a Router behind a real server, with routes: shop/hello on
// hello.test, and others on <name>.test.
func depsRig(t *testing.T, opts RouterOptions, cfgs map[routing.Key]AppConfig) (*Router, string, *keyedPusher) {
	t.Helper()
	p := &keyedPusher{}
	opts.Pusher = p
	rt := NewRouter(opts)
	var routes []routing.Route[AppConfig]
	for k, cfg := range cfgs {
		routes = append(routes, routing.Route[AppConfig]{Key: k, Hosts: []string{k.Name + ".test"}, Value: cfg})
	}
	rt.SetRoutes(routes, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: rt, ReadHeaderTimeout: 10 * time.Second}
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	ds := NewServer(rt, srv)
	go ds.Serve(ln)
	t.Cleanup(func() { ds.Close() })
	t.Cleanup(rt.Close)
	return rt, "http://" + ln.Addr().String(), p
}

type reply struct {
	code int
	body string
}

func holdOne(t *testing.T, url, host string) chan reply {
	done := make(chan reply, 1)
	go func() {
		code, _, body := do(t, t.Context(), url, host)
		done <- reply{code, body}
	}()
	return done
}

func stillHeld(t *testing.T, done chan reply, why string) {
	t.Helper()
	select {
	case r := <-done:
		t.Fatalf("answered %d %q %s", r.code, r.body, why)
	case <-time.After(100 * time.Millisecond):
	}
}

func pushedWait(t *testing.T, p *keyedPusher, k routing.Key, want int64) {
	t.Helper()
	testwait.For(t, 5*time.Second, k.String()+" pushed "+string(rune('0'+want)), func() bool { return p.last(k) == want })
}

// TestDependencyTogether: a request to an app that wakes another (in
// another namespace) tells the scalers both are held at once, is released
// only once the dependency has a ready endpoint too, and the
// dependency's hold drops with the release; the cold start has a
// Dependencies phase as long as the wait beyond the app's own readiness.
func TestDependencyTogether(t *testing.T) {
	var mu sync.Mutex
	var records []ColdStartRecord
	rt, url, p := depsRig(t, RouterOptions{OnColdStart: func(r ColdStartRecord) {
		mu.Lock()
		records = append(records, r)
		mu.Unlock()
	}}, map[routing.Key]AppConfig{
		shopHello: {Wakes: &Wakes{Apps: []routing.Key{dataDB}}},
		dataDB:    {},
	})
	done := holdOne(t, url, "hello.test")
	waitHeld(t, rt, 1)
	pushedWait(t, p, shopHello, 1)
	pushedWait(t, p, dataDB, 1)

	readyAt := time.Now()
	rt.SetEndpoints(shopHello, []Endpoint{{Addr: testApp(t, "a"), Ready: true}})
	stillHeld(t, done, "while its dependency data/db had no ready endpoint")
	rt.SetEndpoints(dataDB, []Endpoint{{Addr: testApp(t, "db"), Ready: true}})
	if r := <-done; r.code != 200 || r.body != "a hello.test" {
		t.Fatalf("released: %d %q", r.code, r.body)
	}
	pushedWait(t, p, dataDB, 0)
	pushedWait(t, p, shopHello, 0)

	testwait.For(t, 5*time.Second, "the cold starts of hello and db recorded", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(records) == 2
	})
	byApp := map[string]ColdStartRecord{}
	for _, r := range records {
		byApp[r.Namespace+"/"+r.App] = r
	}
	// db's own cold start, woken for hello: from when it was told to
	// when it was ready, the ~100 ms hello waited on it and more.
	if db := byApp["data/db"]; db.Total() < 100*time.Millisecond || db.Phases[markFirstByte-1] != 0 || db.Phases[markDeps-1] != 0 {
		t.Errorf("data/db's cold start %+v (total %v), want one of 100 ms or more ending at its readiness", db, db.Total())
	}
	deps := byApp["shop/hello"].Phases[markDeps-1]
	if PhaseNames[markDeps-1] != "Dependencies" || deps < 90*time.Millisecond || deps > time.Since(readyAt) {
		t.Errorf("phase %s lasted %v, want the 100 ms or so the request waited on data/db", PhaseNames[markDeps-1], deps)
	}

	// Warm now: a new request goes straight to the app, nothing pushed.
	before := len(p.values(shopHello))
	if code, _, body := do(t, t.Context(), url, "hello.test"); code != 200 || body != "a hello.test" {
		t.Errorf("warm: %d %q", code, body)
	}
	if got := len(p.values(shopHello)); got != before {
		t.Errorf("a warm request was held: %v", p.values(shopHello))
	}
}

// TestDependencyOrdered: hello wakes api Ordered, api wakes db: db is told
// first, api once db is ready, hello's own hold once api is ready; the
// wait before hello was told is in the Dependencies phase.
func TestDependencyOrdered(t *testing.T) {
	var mu sync.Mutex
	var records []ColdStartRecord
	rt, url, p := depsRig(t, RouterOptions{OnColdStart: func(r ColdStartRecord) {
		mu.Lock()
		records = append(records, r)
		mu.Unlock()
	}}, map[routing.Key]AppConfig{
		shopHello: {Wakes: &Wakes{Apps: []routing.Key{shopAPI}, Ordered: true}},
		shopAPI:   {Wakes: &Wakes{Apps: []routing.Key{dataDB}}},
		dataDB:    {},
	})
	done := holdOne(t, url, "hello.test")
	waitHeld(t, rt, 1)
	pushedWait(t, p, dataDB, 1)
	time.Sleep(50 * time.Millisecond)
	if slices.ContainsFunc(p.values(shopAPI), positive) || slices.ContainsFunc(p.values(shopHello), positive) {
		t.Fatalf("api %v and hello %v told before db was ready", p.values(shopAPI), p.values(shopHello))
	}
	rt.SetEndpoints(dataDB, []Endpoint{{Addr: testApp(t, "db"), Ready: true}})
	pushedWait(t, p, shopAPI, 1)
	time.Sleep(50 * time.Millisecond)
	if slices.ContainsFunc(p.values(shopHello), positive) {
		t.Fatalf("hello told before api was ready: %v", p.values(shopHello))
	}
	rt.SetEndpoints(shopAPI, []Endpoint{{Addr: testApp(t, "api"), Ready: true}})
	pushedWait(t, p, shopHello, 1)
	rt.SetEndpoints(shopHello, []Endpoint{{Addr: testApp(t, "a"), Ready: true}})
	if r := <-done; r.code != 200 {
		t.Fatalf("released: %d %q", r.code, r.body)
	}
	pushedWait(t, p, dataDB, 0)
	pushedWait(t, p, shopAPI, 0)
	testwait.For(t, 5*time.Second, "the cold starts of hello, api and db recorded", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(records) == 3
	})
	var hello ColdStartRecord
	for _, r := range records {
		if r.App == "hello" {
			hello = r
		}
	}
	if deps := hello.Phases[markDeps-1]; deps < 100*time.Millisecond {
		t.Errorf("Dependencies lasted %v, want the 100 ms and more hello waited before it was told", deps)
	}
}

// TestDependencyTimeoutNamesIt: a dependency with no AppRoute does not
// hold the request forever: at the cold-start timeout its answer names it.
func TestDependencyTimeoutNamesIt(t *testing.T) {
	rt, url, _ := depsRig(t, RouterOptions{ColdStartTimeout: 300 * time.Millisecond}, map[routing.Key]AppConfig{
		shopHello: {Wakes: &Wakes{Apps: []routing.Key{dataDB}}},
	})
	done := holdOne(t, url, "hello.test")
	waitHeld(t, rt, 1)
	rt.SetEndpoints(shopHello, []Endpoint{{Addr: testApp(t, "a"), Ready: true}})
	r := <-done
	code, body := r.code, r.body
	if code != http.StatusGatewayTimeout || !strings.Contains(body, "dependency data/db, which has no AppRoute") {
		t.Errorf("got %d %q, want 504 naming data/db", code, body)
	}
	waitHeld(t, rt, 0)
	if rt.deps.nWaiting.Load() != 0 {
		t.Errorf("%d apps still wait on dependencies", rt.deps.nWaiting.Load())
	}
}

// TestDependencyCycle: two AppRoutes that wake each other (two
// RoutePolicies created at once) neither loop nor deadlock, Together or
// Ordered.
func TestDependencyCycle(t *testing.T) {
	for _, ordered := range []bool{false, true} {
		rt, url, p := depsRig(t, RouterOptions{}, map[routing.Key]AppConfig{
			shopHello: {Wakes: &Wakes{Apps: []routing.Key{shopAPI}, Ordered: ordered}},
			shopAPI:   {Wakes: &Wakes{Apps: []routing.Key{shopHello}, Ordered: ordered}},
		})
		done := holdOne(t, url, "hello.test")
		waitHeld(t, rt, 1)
		pushedWait(t, p, shopAPI, 1)
		rt.SetEndpoints(shopAPI, []Endpoint{{Addr: testApp(t, "api"), Ready: true}})
		pushedWait(t, p, shopHello, 1)
		rt.SetEndpoints(shopHello, []Endpoint{{Addr: testApp(t, "a"), Ready: true}})
		if r := <-done; r.code != 200 {
			t.Fatalf("ordered %v: %d %q", ordered, r.code, r.body)
		}
	}
}

// TestNoWakesUnchanged: an app without wakes pushes its own count only,
// as before, and starts no dependency work.
func TestNoWakesUnchanged(t *testing.T) {
	rt, url, p := depsRig(t, RouterOptions{}, map[routing.Key]AppConfig{shopHello: {}, dataDB: {}})
	done := holdOne(t, url, "hello.test")
	waitHeld(t, rt, 1)
	rt.SetEndpoints(shopHello, []Endpoint{{Addr: testApp(t, "a"), Ready: true}})
	if r := <-done; r.code != 200 {
		t.Fatalf("%d %q", r.code, r.body)
	}
	if got := p.values(shopHello); len(got) != 2 || got[0] != 1 || got[1] != 0 {
		t.Errorf("pushed %v, want [1 0]", got)
	}
	if got := p.values(dataDB); len(got) != 0 {
		t.Errorf("data/db pushed %v", got)
	}
	if rt.deps.running.Load() || rt.deps.waiting != nil || rt.deps.touched != nil {
		t.Error("an app without wakes started dependency work")
	}
}

// TestDependencyTogetherH2C: a request net/http holds (h2c) waits on the
// dependency as a parked one does, and its timeout names it.
func TestDependencyTogetherH2C(t *testing.T) {
	rt, url, p := depsRig(t, RouterOptions{ColdStartTimeout: 2 * time.Second}, map[routing.Key]AppConfig{
		shopHello: {Wakes: &Wakes{Apps: []routing.Key{dataDB}}},
		dataDB:    {},
	})
	get := func() chan reply {
		done := make(chan reply, 1)
		go func() {
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
			req.Host = "hello.test"
			resp, err := h2cClient(t).Do(req)
			if err != nil {
				done <- reply{0, err.Error()}
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			done <- reply{resp.StatusCode, string(b)}
		}()
		return done
	}
	done := get()
	waitHeld(t, rt, 1)
	pushedWait(t, p, dataDB, 1)
	app := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "a %s", r.Host)
	}))
	app.Config.Protocols = new(http.Protocols)
	app.Config.Protocols.SetHTTP1(true)
	app.Config.Protocols.SetUnencryptedHTTP2(true)
	app.Start()
	t.Cleanup(app.Close)
	rt.SetEndpoints(shopHello, []Endpoint{{Addr: strings.TrimPrefix(app.URL, "http://"), Ready: true}})
	stillHeld(t, done, "while its dependency data/db had no ready endpoint")
	rt.SetEndpoints(dataDB, []Endpoint{{Addr: testApp(t, "db"), Ready: true}})
	if r := <-done; r.code != 200 || r.body != "a hello.test" {
		t.Fatalf("released: %d %q", r.code, r.body)
	}
	pushedWait(t, p, dataDB, 0)
}

func positive(n int64) bool { return n > 0 }

// TestDependencyReleasedByProbing: a dependency's sidecar that answers
// ready is probed as the app's own are, so the request goes before the
// EndpointSlice says so.
func TestDependencyReleasedByProbing(t *testing.T) {
	rt, url, _ := depsRig(t, RouterOptions{ProbeInterval: 5 * time.Millisecond}, map[routing.Key]AppConfig{
		shopHello: {Wakes: &Wakes{Apps: []routing.Key{dataDB}}},
		dataDB:    {},
	})
	admin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(admin.Close)
	rt.SetEndpoints(dataDB, []Endpoint{{Addr: testApp(t, "db"), AdminAddr: strings.TrimPrefix(admin.URL, "http://")}})
	done := holdOne(t, url, "hello.test")
	waitHeld(t, rt, 1)
	rt.SetEndpoints(shopHello, []Endpoint{{Addr: testApp(t, "a"), Ready: true}})
	select {
	case r := <-done:
		if r.code != 200 {
			t.Fatalf("%d %q", r.code, r.body)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("still held: the dependency's ready sidecar was not probed")
	}
}

// TestDependencyRecomputeKeepsNewWaitGated guards an Ordered app against
// a recompute that works from a snapshot of the waiting apps taken before
// the app's new request came: hello's last held request leaves (a
// recompute starts, snapshots nobody waiting, and is held up on rt.mu
// here as by a large SetRoutes) and a new request to hello comes. That
// recompute must not clear the gate the new request's admission set:
// hello is not told to the scalers before data/db has a ready pod.
func TestDependencyRecomputeKeepsNewWaitGated(t *testing.T) {
	rt, url, p := depsRig(t, RouterOptions{}, map[routing.Key]AppConfig{
		shopHello: {Wakes: &Wakes{Apps: []routing.Key{dataDB}, Ordered: true}},
		dataDB:    {},
	})
	rt.mu.Lock()
	a := rt.apps[shopHello]
	rt.mu.Unlock()
	rt.admit(a, 100, time.Now()) // a first request to hello, waiting on db
	pushedWait(t, p, dataDB, 1)
	rt.mu.Lock()
	rt.leave(a) // it times out: the recompute snapshots {} and blocks on rt.mu
	time.Sleep(50 * time.Millisecond)
	done := holdOne(t, url, "hello.test") // a new request to hello
	waitHeld(t, rt, 1)
	rt.mu.Unlock()
	time.Sleep(100 * time.Millisecond)
	if slices.ContainsFunc(p.values(shopHello), positive) {
		t.Errorf("hello (Ordered) told to the scalers %v while data/db had no ready pod", p.values(shopHello))
	}
	rt.SetEndpoints(dataDB, []Endpoint{{Addr: testApp(t, "db"), Ready: true}})
	rt.SetEndpoints(shopHello, []Endpoint{{Addr: testApp(t, "a"), Ready: true}})
	if r := <-done; r.code != http.StatusOK {
		t.Errorf("hello, once db and hello were up: %d %q", r.code, r.body)
	}
}

// TestDependencyQuickLeaveLeavesNoWait guards an app whose request is
// admitted and gone within one recompute's window (the recompute
// snapshotted the waiting apps before it came and ran after it left, so
// no recompute ever saw it): its depsWait and gate must not outlive its
// held requests. Before, they stayed set, and once its AppRoute dropped
// its wakes every request to it, ready or not, waited to the cold-start
// timeout and was answered 504.
func TestDependencyQuickLeaveLeavesNoWait(t *testing.T) {
	shopOther := routing.Key{Namespace: "shop", Name: "other"}
	cfgs := map[routing.Key]AppConfig{
		shopHello: {Wakes: &Wakes{Apps: []routing.Key{dataDB}, Ordered: true}},
		shopOther: {Wakes: &Wakes{Apps: []routing.Key{dataDB}}},
		dataDB:    {},
	}
	rt, url, p := depsRig(t, RouterOptions{ColdStartTimeout: 500 * time.Millisecond}, cfgs)
	rt.mu.Lock()
	a, b := rt.apps[shopHello], rt.apps[shopOther]
	rt.admit(b, 100, time.Now()) // a recompute starts, snapshots {other}, blocks on rt.mu
	time.Sleep(50 * time.Millisecond)
	rt.admit(a, 100, time.Now()) // a client of hello...
	rt.leave(a)                  // ...that went away at once
	rt.mu.Unlock()
	time.Sleep(100 * time.Millisecond)
	rt.leave(b)
	time.Sleep(100 * time.Millisecond)
	a.mu.Lock()
	wait, gated := a.depsWait.Load(), a.gated
	a.mu.Unlock()
	if wait || gated {
		t.Errorf("after every request left: hello depsWait=%v gated=%v, want both false", wait, gated)
	}

	// hello's AppRoute drops its wakes; hello is up.
	cfgs[shopHello] = AppConfig{}
	var routes []routing.Route[AppConfig]
	for k, cfg := range cfgs {
		routes = append(routes, routing.Route[AppConfig]{Key: k, Hosts: []string{k.Name + ".test"}, Value: cfg})
	}
	rt.SetRoutes(routes, nil)
	rt.SetEndpoints(shopHello, []Endpoint{{Addr: testApp(t, "a"), Ready: true}})
	start := time.Now()
	if code, _, body := do(t, t.Context(), url, "hello.test"); code != http.StatusOK {
		t.Errorf("hello, ready and without wakes: %d %q after %v; hello pushed %v", code, body, time.Since(start).Round(time.Millisecond), p.values(shopHello))
	}
}

// TestDependencyOwnOrderKept guards an app's own wakeOrder when it is
// woken as another app's dependency: api is Ordered (it fails at start
// without db), hello (Together) wakes api; api must not be told to the
// scalers before db has a ready pod, though hello's order is Together.
func TestDependencyOwnOrderKept(t *testing.T) {
	rt, url, p := depsRig(t, RouterOptions{}, map[routing.Key]AppConfig{
		shopHello: {Wakes: &Wakes{Apps: []routing.Key{shopAPI}}},
		shopAPI:   {Wakes: &Wakes{Apps: []routing.Key{dataDB}, Ordered: true}},
		dataDB:    {},
	})
	done := holdOne(t, url, "hello.test")
	waitHeld(t, rt, 1)
	pushedWait(t, p, dataDB, 1)
	if !slices.ContainsFunc(p.values(shopHello), positive) {
		t.Errorf("hello (Together) not told to the scalers at once: %v", p.values(shopHello))
	}
	time.Sleep(50 * time.Millisecond)
	if slices.ContainsFunc(p.values(shopAPI), positive) {
		t.Errorf("api (Ordered: needs db up first) told %v before db had a ready pod", p.values(shopAPI))
	}
	rt.SetEndpoints(dataDB, []Endpoint{{Addr: testApp(t, "db"), Ready: true}})
	pushedWait(t, p, shopAPI, 1)
	rt.SetEndpoints(shopAPI, []Endpoint{{Addr: testApp(t, "api"), Ready: true}})
	rt.SetEndpoints(shopHello, []Endpoint{{Addr: testApp(t, "a"), Ready: true}})
	if r := <-done; r.code != http.StatusOK {
		t.Errorf("hello, once db, api and hello were up: %d %q", r.code, r.body)
	}
}

// TestDependencyWakesDroppedReleases: a request to hello held for its
// dependency (hello come up, data/db not) is released once hello's AppRoute
// drops its wakes, though hello still waits (holds it) when the
// recompute runs.
func TestDependencyWakesDroppedReleases(t *testing.T) {
	cfgs := map[routing.Key]AppConfig{
		shopHello: {Wakes: &Wakes{Apps: []routing.Key{dataDB}}},
		dataDB:    {},
	}
	rt, url, p := depsRig(t, RouterOptions{ColdStartTimeout: 5 * time.Second}, cfgs)
	done := holdOne(t, url, "hello.test")
	waitHeld(t, rt, 1)
	pushedWait(t, p, dataDB, 1)
	rt.SetEndpoints(shopHello, []Endpoint{{Addr: testApp(t, "a"), Ready: true}})
	stillHeld(t, done, "with data/db at zero")
	cfgs[shopHello] = AppConfig{}
	var routes []routing.Route[AppConfig]
	for k, cfg := range cfgs {
		routes = append(routes, routing.Route[AppConfig]{Key: k, Hosts: []string{k.Name + ".test"}, Value: cfg})
	}
	rt.SetRoutes(routes, nil)
	select {
	case r := <-done:
		if r.code != http.StatusOK {
			t.Errorf("hello without wakes: %d %q", r.code, r.body)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("hello's request still held 2s after its AppRoute dropped its wakes")
	}
}
