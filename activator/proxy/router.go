package proxy

import (
	"cmp"
	"context"
	"fmt"
	"html"
	"io"
	"maps"
	"net/http"
	"net/http/httputil"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	otelprop "go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/ebb-dev/ebb/internal/holdpush"
	h1 "github.com/ebb-dev/ebb/internal/http1"
	"github.com/ebb-dev/ebb/internal/reqmetrics"
	"github.com/ebb-dev/ebb/internal/routing"
	"github.com/ebb-dev/ebb/internal/staticanswer"
	"github.com/ebb-dev/ebb/internal/tracing"
)

// AppConfig is an app's holding settings, from its AppRoute; zero values
// take the Router's defaults. It is compared whole (SetRoutes): its
// pointers are built once per AppRoute generation by its maker.
type AppConfig struct {
	QueueSize        int
	ColdStartTimeout time.Duration
	// Placeholder answers browsers (Accept: text/html) during a cold start
	// with a small page that refreshes itself, instead of holding them.
	Placeholder bool
	// Page is the route's own placeholder page (spec.placeholder): browsers
	// get it instead of the built-in one during a cold start, with or
	// without Placeholder.
	Page *Page
	// Static are the route's static responses (spec.staticResponses): a
	// request one matches is answered from it while the app has no ready
	// pod (any rule) or has one (Always rules), never held nor counted.
	Static *staticanswer.Set
	// Fallback is host:port of the fallback Service's ClusterIP
	// (spec.fallback): a held request goes there at its cold-start timeout,
	// and a request that finds the hold queue full goes there at once.
	// Empty: none.
	Fallback string
	// Timeouts bound the requests forwarded to the app (warm, or released
	// after a hold) and to its fallback: spec.requestTimeout,
	// responseHeaderTimeout and streamIdleTimeout; zero fields take the
	// Router's.
	Timeouts h1.Timeouts
	// Deployment is the app's workload (its AppRoute's scaleTargetRef) as
	// workload.Key names it: a Deployment's name, Kind.group/name for any
	// other kind; watched during a cold start.
	Deployment string
	// Wakes are the apps this app needs up before its held requests go
	// (spec.wakes, spec.wakeOrder); nil: none. SetRoutes keeps the
	// pointer it has when the content is the same.
	Wakes *Wakes
	// Concurrency is the most requests one pod's app is given at once
	// (spec.concurrency; 0: no limit). Held requests are released to a
	// ready pod only while this activator has fewer than that many of
	// them there; the rest stay held (and counted) until one ends, or
	// until their cold-start timeout. See take.
	Concurrency int32
}

// Page is a route's own placeholder page.
type Page struct {
	Status int
	// Header is the page's header, Content-Type included (text/html;
	// charset=utf-8 unless the route gives one); lines the same, for the
	// HTTP/1.1 engine.
	Header http.Header
	lines  string
	Body   string
}

// NewPage returns the page answered with status, the header fields
// (name, value) in order, and body. It refuses what would break the
// framing of the connection it is answered on (the CRDs refuse it first;
// an AppRoute may be written by hand): a status that has no body by rule
// (1xx, 204, 304: the body would be read as the next response), a framing
// or hop-by-hop header (the engine writes the framing itself), a name that
// is not a token, a value with a control character (CR, LF) or with white
// space at an end.
func NewPage(status int, fields [][2]string, body string) (*Page, error) {
	var problems []string
	if status < 200 || status > 599 || status == http.StatusNoContent || status == http.StatusNotModified {
		problems = append(problems, fmt.Sprintf("status %d: a placeholder page has a body; want 200-599 but 204 and 304", status))
	}
	p := &Page{Status: status, Header: http.Header{}, Body: body}
	var b strings.Builder
	for _, f := range fields {
		switch {
		case !h1.ValidFieldName(f[0]):
			problems = append(problems, fmt.Sprintf("header %q: not a header name", f[0]))
		case slices.Contains(framingHeaders, strings.ToLower(f[0])):
			problems = append(problems, fmt.Sprintf("header %q: ebb writes the framing itself", f[0]))
		case !h1.ValidFieldValue(f[1]):
			problems = append(problems, fmt.Sprintf("header %q: its value has a control character or white space at an end", f[0]))
		}
		p.Header.Add(f[0], f[1])
		b.WriteString(f[0] + ": " + f[1] + "\r\n")
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("placeholder page refused: %s", strings.Join(problems, "; "))
	}
	if p.Header.Get("Content-Type") == "" {
		p.Header.Set("Content-Type", "text/html; charset=utf-8")
		b.WriteString("Content-Type: text/html; charset=utf-8\r\n")
	}
	p.lines = b.String()
	return p, nil
}

// framingHeaders are the header names a placeholder page may not set:
// the framing and the hop-by-hop headers, as the CRDs refuse them.
var framingHeaders = []string{"content-length", "transfer-encoding", "connection", "keep-alive", "upgrade", "te", "trailer", "proxy-connection"}

// Endpoint is one app endpoint as its Service's EndpointSlices list it.
type Endpoint struct {
	// Addr is host:port of the Service's target port on the pod (the
	// sidecar's data port).
	Addr string
	// AdminAddr is host:port of the pod's sidecar admin port, probed for
	// GET /ready while requests are held and the endpoint is not ready yet;
	// empty means never probed.
	AdminAddr string
	Ready     bool
}

// Pusher receives every change of an app's held count; holdpush.Client is one.
type Pusher interface {
	Set(app holdpush.App, held int64)
}

// Defaults of RouterOptions.
const (
	DefaultQueueSize        = 1000
	DefaultMaxHeld          = 20000
	DefaultMaxHeldBytes     = 64 << 20
	DefaultColdStartTimeout = 2 * time.Minute
	DefaultProbeInterval    = 10 * time.Millisecond
	// DefaultResponseHeaderTimeout is the sidecar's default too: longer
	// than any live app takes to begin an answer.
	DefaultResponseHeaderTimeout = 10 * time.Minute
	// DefaultStreamIdleTimeout closes a WebSocket or a streamed response
	// silent both ways for an hour: long enough for any live stream that
	// sends keep-alives, short enough that a tunnel its client left does
	// not keep the app from zero for good.
	DefaultStreamIdleTimeout = time.Hour
)

// RouterOptions configure a Router.
type RouterOptions struct {
	// QueueSize is an app's hold queue unless its AppRoute sets one.
	QueueSize int
	// MaxHeld caps the requests held across every app.
	MaxHeld int
	// MaxHeldBytes caps the bytes the HTTP/1.x requests parked across
	// every app keep (their heads for the app, h1.Conn.ParkSize): a client
	// sending heads near the data port's MaxHeaderBytes takes this many
	// bytes, not MaxHeld of them, with its requests.
	MaxHeldBytes int64
	// ColdStartTimeout is how long a request is held unless the app's
	// AppRoute sets it.
	ColdStartTimeout time.Duration
	// ProbeInterval is the period of the /ready probes of not-ready sidecars
	// while requests are held.
	ProbeInterval time.Duration
	// RetryAfter is sent with 503 when a queue is full.
	RetryAfter time.Duration
	// RequestTimeout, ResponseHeaderTimeout and StreamIdleTimeout bound
	// the requests forwarded to an app whose AppRoute sets none (see
	// AppConfig.Timeouts); zero: none.
	RequestTimeout, ResponseHeaderTimeout, StreamIdleTimeout time.Duration

	Pusher  Pusher
	Metrics *Metrics
	// Requests records the requests forwarded; nil records none.
	Requests *reqmetrics.Recorder
	// Watcher observes the phases of cold starts on the API server; nil:
	// only the phases the Router sees itself are told apart.
	Watcher ColdStartWatcher
	// OnColdStart is called with every cold start once it ends.
	OnColdStart func(ColdStartRecord)
	// Tracer makes a span per held request; nil: tracing is off.
	Tracer trace.Tracer
	Log    logr.Logger
}

// Router is the activator's request path: it routes a request by its
// Host and path, proxies it straight to a ready pod of its app, or holds it
// until one is ready.
type Router struct {
	opts      RouterOptions
	table     atomic.Pointer[routing.Table[*app]]
	upstreams *upstreams
	fallback  *httputil.ReverseProxy // of every fallback, for net/http's path
	probe     *http.Client
	held      atomic.Int64 // across every app
	heldBytes atomic.Int64 // ParkSize of the requests parked, across every app
	holding   atomic.Int64 // apps holding at least one request
	parking   parking      // held HTTP/1.x requests, parked in the engine
	// stopped is closed when Shutdown stops holding: every request held
	// then, or after, is answered 503 with Retry-After.
	stopped  chan struct{}
	stopOnce sync.Once

	mu   sync.Mutex // guards apps; taken by writers only
	apps map[routing.Key]*app

	deps depState // deps.go
}

// NewRouter returns a Router with an empty routing table.
func NewRouter(opts RouterOptions) *Router {
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics(prometheus.NewRegistry())
	}
	if opts.Pusher == nil {
		opts.Pusher = noPush{}
	}
	opts.QueueSize = cmp.Or(opts.QueueSize, DefaultQueueSize)
	opts.MaxHeld = cmp.Or(opts.MaxHeld, DefaultMaxHeld)
	opts.MaxHeldBytes = cmp.Or(opts.MaxHeldBytes, DefaultMaxHeldBytes)
	opts.ColdStartTimeout = cmp.Or(opts.ColdStartTimeout, DefaultColdStartTimeout)
	opts.ProbeInterval = cmp.Or(opts.ProbeInterval, DefaultProbeInterval)
	opts.RetryAfter = cmp.Or(opts.RetryAfter, time.Second)
	rt := &Router{
		opts:      opts,
		upstreams: newUpstreams(opts.Log),
		// A sidecar's /ready is read from a pod, which is whatever its
		// namespace's user makes it: bounded in time (the whole exchange),
		// in head bytes, never followed elsewhere by a redirect, and its
		// body never read (probeReady).
		probe: &http.Client{Timeout: 500 * time.Millisecond, Transport: &http.Transport{
			MaxIdleConnsPerHost: 2, IdleConnTimeout: 10 * time.Second, DisableCompression: true,
			MaxResponseHeaderBytes: probeMaxHeaderBytes,
		}, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		apps:    map[routing.Key]*app{},
		stopped: make(chan struct{}),
	}
	rt.fallback = rt.upstreams.newFallbackProxy(rt)
	rt.parking.router = rt
	rt.table.Store(routing.Build[*app](nil, nil))
	return rt
}

// answerGrace is how long Shutdown, once its context has ended, waits
// for the 503 answers of the requests still held and for the released
// requests' answers before it cuts their connections.
const answerGrace = 2 * time.Second

// Shutdown ends holding, for an activator that exits; Server.Shutdown
// calls it once the data port no longer accepts. It waits until no
// request is held (each is forwarded once its app has a ready pod,
// answered 504 at its cold-start timeout, or left by its client) and the
// connection of every released request is done, its answer sent; or
// until ctx ends: then it answers each request still held, and any held
// from then on, 503 with Retry-After, and waits up to answerGrace for
// those answers and the released requests' before it cuts what is left.
// It returns ctx's error when it had to stop holding.
func (rt *Router) Shutdown(ctx context.Context) error {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !rt.idle() {
		select {
		case <-ctx.Done():
			return rt.stopHolding(ctx.Err())
		case <-tick.C:
		}
	}
	return nil
}

// idle reports whether nothing is held and no released request is being
// answered.
func (rt *Router) idle() bool { return rt.held.Load() == 0 && rt.parking.out.Load() == 0 }

// stopHolding answers every request held now or later 503 with
// Retry-After and waits up to answerGrace for the answers in flight; then
// it cuts the connections left.
func (rt *Router) stopHolding(why error) error {
	rt.stopOnce.Do(func() { close(rt.stopped) }) // held in a handler: answered there
	deadline := time.Now().Add(answerGrace)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		rt.parking.answerHeld() // again each time: a request parked since
		if rt.idle() {
			return why
		}
		if time.Now().After(deadline) {
			break
		}
		<-tick.C
	}
	n := rt.parking.cut(false)
	rt.opts.Log.Info("shutdown: connections cut, their requests not answered within the grace", "connections", n, "grace", answerGrace.String())
	return why
}

// stopping reports whether Shutdown has stopped holding.
func (rt *Router) stopping() bool {
	select {
	case <-rt.stopped:
		return true
	default:
		return false
	}
}

// shuttingDown is the 503 answer to a request held while the activator
// exits.
func (rt *Router) shuttingDown(a *app) string {
	return fmt.Sprintf("ebb-activator: this activator is shutting down and app %s has no ready pod yet; retry", a.key)
}

// Close closes every held and released connection at once, and parks no
// more.
func (rt *Router) Close() {
	rt.stopOnce.Do(func() { close(rt.stopped) })
	rt.parking.cut(true)
}

type noPush struct{}

func (noPush) Set(holdpush.App, int64) {}

// app is the state of one app, kept across routing-table rebuilds.
type app struct {
	key  routing.Key
	push holdpush.App
	cfg  atomic.Pointer[AppConfig]
	eps  atomic.Pointer[endpointSet]
	rr   atomic.Uint64
	gone atomic.Bool // its AppRoute was deleted
	// depsWait is set while its held requests wait on a dependency
	// (deps.go): a ready pod of its own does not release them.
	depsWait atomic.Bool

	mu     sync.Mutex
	held   int64
	h2wait map[*http.Request]time.Time // requests held in their handler (hold), by start
	// slots counts, per ready endpoint, the held requests released to it
	// that have not ended, with a concurrency limit (take, give).
	slots     map[*upstream]int32
	wake      chan struct{} // closed (and replaced) when endpoints change
	coldSince time.Time     // first hold of the current cold start
	cs        *coldStart    // the cold start under way, until its first byte
	lastMarks marks         // of the last cold start, resolved
	series    *appSeries    // made on first use (metrics.go); nil before and once its route is gone
	probing   bool
	probed    map[string]bool // addresses a probe found ready
	all       []Endpoint      // as last set
	depHeld   int64           // dependents waiting on it (deps.go)
	gated     bool            // Ordered: its own hold is not told yet
}

type endpointSet struct {
	ready    []*upstream
	notReady []Endpoint
}

// getApp returns the state of key, creating it. Callers hold d.mu.
func (rt *Router) getApp(key routing.Key) *app {
	a := rt.apps[key]
	if a == nil {
		a = &app{key: key, push: holdpush.App{Namespace: key.Namespace, Name: key.Name}, wake: make(chan struct{}), probed: map[string]bool{}}
		a.cfg.Store(&AppConfig{})
		a.eps.Store(&endpointSet{})
		rt.apps[key] = a
	}
	return a
}

// SetRoutes replaces the routing table, with the domains claims bind to
// namespaces. Apps no longer routed answer their held requests at once (503).
func (rt *Router) SetRoutes(routes []routing.Route[AppConfig], claims routing.Claims) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rs := make([]routing.Route[*app], 0, len(routes))
	keep := make(map[routing.Key]bool, len(routes))
	var relimited []*app // their held requests may have slots now
	for _, r := range routes {
		a := rt.getApp(r.Key)
		cfg := r.Value
		if old := a.cfg.Load(); old.Wakes != nil && cfg.Wakes != nil && old.Wakes.equal(cfg.Wakes) {
			cfg.Wakes = old.Wakes
		}
		if old := a.cfg.Load(); *old != cfg {
			a.cfg.Store(&cfg)
			if old.Concurrency != cfg.Concurrency {
				relimited = append(relimited, a)
			}
		}
		a.gone.Store(false)
		keep[r.Key] = true
		rs = append(rs, routing.Route[*app]{Key: r.Key, Generation: r.Generation, Created: r.Created, Hosts: r.Hosts, PathPrefixes: r.PathPrefixes, HostPaths: r.HostPaths, Service: r.Service, ClusterIPs: r.ClusterIPs, Value: a})
	}
	t := routing.Build(rs, claims)
	rt.table.Store(t)
	rt.opts.Metrics.routes.Set(float64(t.Len()))
	for k, a := range rt.apps {
		if keep[k] {
			continue
		}
		a.gone.Store(true)
		a.broadcast()
		rt.releaseParked(a)
		a.mu.Lock()
		rt.opts.Metrics.forgetLocked(a)
		idle := a.held == 0 && len(a.all) == 0
		a.mu.Unlock()
		if idle {
			delete(rt.apps, k)
		}
	}
	for _, a := range relimited {
		a.broadcast()
		rt.releaseParked(a)
	}
	if rt.deps.nWaiting.Load() > 0 {
		rt.kickDeps() // a dependency's AppRoute may have come or gone
	}
	for _, c := range t.Conflicts {
		rt.opts.Log.V(1).Info("a host an AppRoute claims is not routed to it", "host", c.Host, "prefix", c.Prefix, "reason", c.Reason, "winner", c.Winner.String(), "loser", c.Loser.String())
	}
}

// Served lists the AppRoutes in the table this replica serves and the
// generation of each.
func (rt *Router) Served() map[string]int64 {
	out := map[string]int64{}
	rt.table.Load().Routes(func(r *routing.Route[*app]) { out[r.Key.String()] = r.Generation })
	return out
}

// SetEndpoints replaces the endpoints of an app. Held requests go to the
// ready ones at once.
func (rt *Router) SetEndpoints(key routing.Key, eps []Endpoint) {
	rt.mu.Lock()
	a := rt.getApp(key)
	rt.mu.Unlock()
	if rt.setEndpoints(a, eps) {
		rt.releaseParked(a)
		rt.forgetUpstreams()
	}
}

// forgetUpstreams drops the cached upstreams of addresses no app lists any
// more (pods come and go with new IPs).
func (rt *Router) forgetUpstreams() {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	keep := map[string]bool{}
	for _, a := range rt.apps {
		a.mu.Lock()
		for _, e := range a.all {
			keep[e.Addr] = true
		}
		a.mu.Unlock()
		if f := a.cfg.Load().Fallback; f != "" {
			keep[f] = true
		}
	}
	rt.upstreams.forget(keep)
}

// setEndpoints records eps for a; false if they did not change.
func (rt *Router) setEndpoints(a *app, eps []Endpoint) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if slices.Equal(a.all, eps) {
		return false
	}
	a.all = slices.Clone(eps)
	present := make(map[string]bool, len(eps))
	for _, e := range eps {
		present[e.Addr] = true
	}
	for _, e := range eps {
		if e.Ready {
			delete(a.probed, e.Addr) // the slice caught up: trust it from now on
		}
	}
	for addr := range a.probed {
		if !present[addr] {
			delete(a.probed, addr)
		}
	}
	rt.rebuildLocked(a)
	return true
}

// rebuildLocked recomputes a's endpoint set and wakes its waiters. Callers
// hold a.mu.
func (rt *Router) rebuildLocked(a *app) {
	set := &endpointSet{}
	for _, e := range a.all {
		if e.Ready || a.probed[e.Addr] {
			set.ready = append(set.ready, rt.upstreams.get(e.Addr))
		} else {
			set.notReady = append(set.notReady, e)
		}
	}
	a.eps.Store(set)
	if len(set.ready) > 0 && !a.coldSince.IsZero() {
		rt.opts.Metrics.observeColdStartLocked(a, time.Since(a.coldSince))
		a.coldSince = time.Time{}
	}
	if len(set.ready) > 0 && a.cs != nil {
		a.cs.m.mark(markReady, time.Now())
	}
	close(a.wake)
	a.wake = make(chan struct{})
	if rt.deps.nWaiting.Load() > 0 {
		rt.kickDeps() // a may be a dependency of an app holding requests
	}
}

func (a *app) broadcast() {
	a.mu.Lock()
	close(a.wake)
	a.wake = make(chan struct{})
	a.mu.Unlock()
}

// pick spreads requests over the ready endpoints, round robin.
func (a *app) pick() *upstream {
	set := a.eps.Load()
	if n := len(set.ready); n > 0 {
		return set.ready[(a.rr.Add(1)-1)%uint64(n)]
	}
	return nil
}

// take picks a ready endpoint for a held request that is released. An
// app without a concurrency limit gets pick's. With a limit, it takes a
// slot on the next ready endpoint, round robin, where this activator has
// fewer than limit of the app's released requests, and nil when every
// one has that many: a burst held at zero then goes out as the pods can
// take it, not all to the first ready pod, whose sidecar would answer 503
// past its queue (Knative's activator keeps to containerConcurrency per
// pod the same way). The caller gives the slot back with give once the
// exchange has ended. Warm requests (pick) take no slot: they go to the
// sidecar's queue as a client's straight to the pod would.
func (a *app) take(limit int32) *upstream {
	if limit <= 0 {
		return a.pick()
	}
	set := a.eps.Load()
	n := uint64(len(set.ready))
	if n == 0 {
		return nil
	}
	first := a.rr.Add(1) - 1
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := range n {
		up := set.ready[(first+i)%n]
		if a.slots[up] < limit {
			if a.slots == nil {
				a.slots = map[*upstream]int32{}
			}
			a.slots[up]++
			return up
		}
	}
	return nil
}

// give returns the slot take took on up (with a limit) for a released
// request of a, and sends a's next held request, if any, to the slot.
// Slots are the app's: two AppRoutes naming one Service each keep to the
// limit, so its pods may get up to twice it (the sidecar queues the rest).
func (rt *Router) give(a *app, up *upstream) {
	a.mu.Lock()
	if a.slots[up]--; a.slots[up] <= 0 {
		delete(a.slots, up)
	}
	close(a.wake) // HTTP/2 requests held in their handler wait on it
	a.wake = make(chan struct{})
	a.mu.Unlock()
	rt.releaseParked(a)
}

// oldestWaiter is the start of a's oldest request held in its handler
// (HTTP/2), zero if none.
func (a *app) oldestWaiter() time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	var t time.Time
	for _, s := range a.h2wait {
		if t.IsZero() || s.Before(t) {
			t = s
		}
	}
	return t
}

// inReady says whether up is one of a's ready endpoints now.
func (a *app) inReady(up *upstream) bool {
	return slices.Contains(a.eps.Load().ready, up)
}

// ServeHTTP routes, proxies or holds one request that net/http serves:
// HTTP/2 (h2c, gRPC) and the HTTP/1.x requests the engine hands off
// (Server.ServeRequest).
func (rt *Router) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	route, ok := rt.table.Load().Lookup(r.Host, r.URL.Path)
	if !ok {
		rt.opts.Metrics.notFound.Inc()
		http.Error(w, notRouted(r.Host, r.URL.Path), http.StatusNotFound)
		return
	}
	a := route.Value
	up := a.pick()
	if set := a.cfg.Load().Static; set != nil {
		if rule := set.Match(r.Method, requestTarget(r), func(name string) (string, bool) {
			v := r.Header.Values(name)
			if len(v) != 1 {
				return "", false
			}
			return v[0], true
		}); rule != nil && (up == nil || rule.When == staticanswer.Always) {
			rt.opts.Metrics.countStatic()
			rule.WriteHTTP(w, r.Method)
			return
		}
	}
	if up != nil && !a.depsWait.Load() {
		rt.opts.Metrics.proxied.Inc()
		r.Header.Del(FallbackHopHeader)
		w, r, cancel := rt.withTimeouts(w, r, a)
		defer cancel()
		rt.opts.Requests.Serve(up, w, r, time.Now())
		return
	}
	rt.hold(w, r, a)
}

// requestTarget is r's target in origin form as received (an HTTP/2
// request's :path); the path and query of one in absolute form, as
// escaped in it.
func requestTarget(r *http.Request) string {
	if strings.HasPrefix(r.RequestURI, "/") {
		return r.RequestURI
	}
	return r.URL.RequestURI()
}

// notRouted is the 404 answer to a request for a host and path no app is
// routed for.
func notRouted(host, path string) string {
	return fmt.Sprintf("ebb-activator: no app is routed for host %q and path %q", host, path)
}

// forwardHeld forwards a request held since heldAt to up, notes its first
// response byte (the first one ends the cold start), records it, and
// traces it: a span from heldAt to its response's end, continuing the
// request's trace, with a child span per phase of the cold start it
// waited on.
func (rt *Router) forwardHeld(w http.ResponseWriter, r *http.Request, a *app, up *upstream, heldAt time.Time) {
	var span trace.Span
	if rt.opts.Tracer != nil {
		var ctx context.Context
		ctx, span = rt.opts.Tracer.Start(tracing.Propagator.Extract(r.Context(), otelprop.HeaderCarrier(r.Header)), "ebb-activator hold",
			trace.WithTimestamp(heldAt), trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("ebb.app", a.key.String()), attribute.String("server.address", r.Host)))
		if span.SpanContext().IsSampled() {
			tracing.Propagator.Inject(ctx, otelprop.HeaderCarrier(r.Header))
		}
	}
	w, r, cancel := rt.withTimeouts(w, r, a)
	defer cancel()
	m, ok := a.heldMarks(heldAt)
	var head time.Time
	rw := &reqmetrics.Writer{ResponseWriter: w, OnHead: func() {
		head = time.Now()
		rt.firstByte(a, head)
	}}
	up.ServeHTTP(rw, r)
	rt.opts.Requests.Record(rw, r, heldAt)
	if span != nil {
		rt.traceHeld(span, m, ok, heldAt, head)
		if rw.Code != 0 {
			span.SetAttributes(attribute.Int("http.response.status_code", rw.Code))
		}
		if rw.Code == 0 || rw.Code >= 500 {
			span.SetStatus(codes.Error, "")
		}
		span.End()
	}
}

type admission int

const (
	admitted admission = iota
	appFull
	overShare
	globalFull
)

// fairShare is how many requests one app may hold while n apps (itself
// included) hold some: MaxHeld ÷ (n + 1), at least 1. Whatever the apps
// holding do, a newcomer finds at least that many slots free, so one
// app's backlog cannot starve the others' cold starts.
func (rt *Router) fairShare(n int64) int64 {
	return max(1, int64(rt.opts.MaxHeld)/(n+1))
}

// admit takes a slot in a's queue at now and tells the scaler.
func (rt *Router) admit(a *app, limit int, now time.Time) admission {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.held >= int64(limit) {
		return appFull
	}
	n := rt.holding.Load()
	if a.held == 0 {
		n++
	}
	if a.held >= rt.fairShare(n) {
		return overShare
	}
	if rt.held.Add(1) > int64(rt.opts.MaxHeld) {
		rt.held.Add(-1)
		return globalFull
	}
	if a.held == 0 {
		rt.holding.Add(1)
	}
	a.held++
	if a.held == 1 {
		if w := a.cfg.Load().Wakes; w != nil {
			// Ordered: not told before the recompute has seen what it needs up.
			a.gated = w.Ordered
			rt.waitOn(a)
		} else {
			// Its wakes are gone: nothing of an earlier wait may hold it.
			a.depsWait.Store(false)
			a.gated = false
		}
	}
	rt.opts.Pusher.Set(a.push, a.pushCountLocked())
	rt.opts.Metrics.setHeldLocked(a)
	if a.coldSince.IsZero() {
		a.coldSince = now
		rt.beginColdStart(a, now)
	}
	if !a.probing {
		a.probing = true
		go rt.probeLoop(a)
	}
	return admitted
}

// leave frees a slot and tells the scaler.
func (rt *Router) leave(a *app) {
	a.mu.Lock()
	a.held--
	rt.held.Add(-1)
	if a.held == 0 {
		rt.holding.Add(-1)
		rt.stopWaiting(a)
		// Nothing of its own waits any more; a recompute that never saw
		// this hold would not clear these.
		a.depsWait.Store(false)
		a.gated = false
	}
	rt.opts.Pusher.Set(a.push, a.pushCountLocked())
	rt.opts.Metrics.setHeldLocked(a)
	if a.held == 0 && len(a.eps.Load().ready) == 0 {
		a.coldSince = time.Time{} // nobody waits any more: this cold start is over
		a.endColdStart()
	}
	a.mu.Unlock()
}

// admitHeld takes a slot for a request to a held at start; it returns why
// not ("" when admitted).
func (rt *Router) admitHeld(a *app, start time.Time) string {
	if rt.stopping() {
		return "this activator is shutting down"
	}
	limit := cmp.Or(a.cfg.Load().QueueSize, rt.opts.QueueSize)
	switch rt.admit(a, limit, start) {
	case appFull:
		return fmt.Sprintf("the hold queue of app %s is full (%d requests)", a.key, limit)
	case overShare:
		n := rt.holding.Load()
		return fmt.Sprintf("app %s holds its fair share of this activator's %d request slots (%d with %d app(s) holding)", a.key, rt.opts.MaxHeld, rt.fairShare(n), n)
	case globalFull:
		return fmt.Sprintf("the activator holds its maximum of %d requests", rt.opts.MaxHeld)
	}
	return ""
}

// hold holds a request net/http serves in its handler goroutine until a
// has a ready endpoint (HTTP/1.1 requests are held in the engine instead:
// holdH1).
func (rt *Router) hold(w http.ResponseWriter, r *http.Request, a *app) {
	cfg := a.cfg.Load()
	if (cfg.Placeholder || cfg.Page != nil) && r.Method == http.MethodGet && strings.Contains(r.Header.Get("Accept"), "text/html") {
		rt.opts.Metrics.placeholder.Inc()
		rt.placeholderHold(a)
		h := w.Header()
		if p := cfg.Page; p != nil {
			maps.Copy(h, p.Header.Clone())
			w.WriteHeader(p.Status)
			io.WriteString(w, p.Body)
			return
		}
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Cache-Control", "no-store")
		h.Set("Retry-After", strconv.Itoa(int(placeholderRefresh/time.Second)))
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, placeholderPage(a))
		return
	}
	timeout := cmp.Or(cfg.ColdStartTimeout, rt.opts.ColdStartTimeout)
	// Taken before admission, which may start a cold start (and tell the
	// scaler) at this very time: the first request's wait is the cold start.
	start := time.Now()
	if why := rt.admitHeld(a, start); why != "" {
		msg := "ebb-activator: " + why + "; retry later"
		if cfg.Fallback != "" && !rt.stopping() {
			rt.fallbackHTTP(w, r, a, http.StatusServiceUnavailable, rt.retryAfter(), msg, rt.opts.Metrics.countRejected)
			return
		}
		rt.opts.Metrics.countRejected(a)
		w.Header().Set("Retry-After", rt.retryAfter())
		http.Error(w, msg, http.StatusServiceUnavailable)
		return
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	a.mu.Lock()
	if a.h2wait == nil {
		a.h2wait = map[*http.Request]time.Time{}
	}
	a.h2wait[r] = start
	a.mu.Unlock()
	waiting := true
	defer func() {
		if waiting { // it leaves without a slot: parked requests it kept back may have one
			a.mu.Lock()
			delete(a.h2wait, r)
			a.mu.Unlock()
			if a.cfg.Load().Concurrency > 0 {
				rt.releaseParked(a)
			}
		}
	}()
	for {
		a.mu.Lock()
		wake := a.wake
		a.mu.Unlock()
		if !a.depsWait.Load() {
			limit := a.cfg.Load().Concurrency
			if up := a.take(limit); up != nil {
				a.mu.Lock()
				delete(a.h2wait, r)
				a.mu.Unlock()
				waiting = false
				if limit > 0 {
					rt.releaseParked(a) // younger parked requests it kept back: the slots left
				}
				rt.leave(a)
				rt.opts.Metrics.released.Inc()
				r.Header.Del(FallbackHopHeader)
				if limit > 0 {
					// Deferred: ReverseProxy panics (http.ErrAbortHandler)
					// when a response breaks off mid-body.
					defer rt.give(a, up)
				}
				rt.forwardHeld(w, r, a, up, start)
				return
			}
		}
		if a.gone.Load() {
			rt.leave(a)
			http.Error(w, fmt.Sprintf("ebb-activator: the AppRoute of app %s was deleted while the request was held", a.key), http.StatusServiceUnavailable)
			return
		}
		select {
		case <-wake:
		case <-timer.C:
			rt.leave(a)
			msg := strings.TrimSuffix(rt.timedOutMsg(a, time.Since(start), timeout), "\n")
			if a.cfg.Load().Fallback != "" {
				rt.fallbackHTTP(w, r, a, http.StatusGatewayTimeout, "", msg, rt.opts.Metrics.countTimeout)
				return
			}
			rt.opts.Metrics.countTimeout(a)
			http.Error(w, msg, http.StatusGatewayTimeout)
			return
		case <-r.Context().Done():
			rt.leave(a) // the client left: its slot is free at once
			rt.opts.Metrics.canceled.Inc()
			return
		case <-rt.stopped:
			rt.leave(a)
			w.Header().Set("Retry-After", rt.retryAfter())
			http.Error(w, rt.shuttingDown(a), http.StatusServiceUnavailable)
			return
		}
	}
}

// placeholderRefresh is how often the placeholder page reloads, and how long
// each one counts as a held request so the app is woken and kept waking.
const placeholderRefresh = 2 * time.Second

// placeholderHeader is the placeholder page's header lines.
var placeholderHeader = "Content-Type: text/html; charset=utf-8\r\nCache-Control: no-store\r\nRetry-After: " + strconv.Itoa(int(placeholderRefresh/time.Second)) + "\r\n"

// placeholderHold counts a placeholder page as a request held for
// placeholderRefresh, if a has room.
func (rt *Router) placeholderHold(a *app) {
	if rt.admit(a, cmp.Or(a.cfg.Load().QueueSize, rt.opts.QueueSize), time.Now()) == admitted {
		time.AfterFunc(placeholderRefresh, func() { rt.leave(a) })
	}
}

// placeholderPage is the page browsers get while a starts.
func placeholderPage(a *app) string {
	return fmt.Sprintf(`<!doctype html><html><head><meta charset="utf-8"><meta http-equiv="refresh" content="%d"><title>Starting %s</title></head>`+
		`<body style="font-family:sans-serif;text-align:center;margin-top:20vh"><h1>Starting %s…</h1><p>This page reloads by itself.</p></body></html>`+"\n",
		int(placeholderRefresh/time.Second), html.EscapeString(a.key.Name), html.EscapeString(a.key.Name))
}

// probeLoop probes the not-ready sidecars of a while it holds requests,
// or requests of its dependents wait on it, and has no ready endpoint, so
// held requests go out the moment a sidecar is ready rather than after
// EndpointSlice propagation.
func (rt *Router) probeLoop(a *app) {
	t := time.NewTicker(rt.opts.ProbeInterval)
	defer t.Stop()
	inflight := map[string]bool{}
	results := make(chan probeResult, 1024)
	for {
		a.mu.Lock()
		if a.held == 0 && a.depHeld == 0 {
			a.probing = false
			a.mu.Unlock()
			return
		}
		set := a.eps.Load()
		a.mu.Unlock()
		if len(set.ready) == 0 {
			for _, e := range set.notReady {
				if e.AdminAddr == "" || inflight[e.Addr] {
					continue
				}
				inflight[e.Addr] = true
				go func(e Endpoint) {
					select {
					case results <- probeResult{e.Addr, rt.probeReady(e.AdminAddr)}:
					default: // the loop ended or is far behind; the next one probes again
					}
				}(e)
			}
		}
		select {
		case res := <-results:
			delete(inflight, res.addr)
			if res.ready {
				a.mu.Lock()
				changed := slices.ContainsFunc(a.all, func(e Endpoint) bool { return e.Addr == res.addr }) && !a.probed[res.addr]
				if changed {
					a.probed[res.addr] = true
					rt.rebuildLocked(a)
				}
				a.mu.Unlock()
				if changed {
					rt.releaseParked(a)
				}
			}
		case <-t.C:
		}
	}
}

type probeResult struct {
	addr  string
	ready bool
}

// probeMaxHeaderBytes bounds the head of a sidecar's /ready answer (the
// sidecar's is about 150 bytes).
const probeMaxHeaderBytes = 4 << 10

func (rt *Router) probeReady(admin string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+admin+"/ready", nil)
	if err != nil {
		return false
	}
	resp, err := rt.probe.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// Held is the number of requests held now across every app.
func (rt *Router) Held() int64 { return rt.held.Load() }
