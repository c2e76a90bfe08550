package control

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	k8stesting "k8s.io/client-go/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/ebb-dev/ebb/activator/proxy"
	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/internal/routing"
)

// fakeTable is a request path's table: what it was last given.
type fakeTable struct {
	mu     sync.Mutex
	served map[string]int64
}

func (f *fakeTable) SetRoutes(routes []routing.Route[proxy.AppConfig], _ routing.Claims) {
	m := make(map[string]int64, len(routes))
	for _, r := range routes {
		m[r.Key.String()] = r.Generation
	}
	f.mu.Lock()
	f.served = m
	f.mu.Unlock()
}

func (f *fakeTable) SetEndpoints(routing.Key, []proxy.Endpoint) {}

func (f *fakeTable) Served() map[string]int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.served)
}

// replicaServer is a replica's GET RoutingPath, counting the tables (and
// their bytes) it serves.
type replicaServer struct {
	routing *Routing
	tables  atomic.Int64 // answers with a body (200)
	bytes   atomic.Int64 // bytes of body
}

func (s *replicaServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	cw := &countingWriter{ResponseWriter: w}
	s.routing.ServeHTTP(cw, r)
	if cw.status == 0 || cw.status == http.StatusOK {
		s.tables.Add(1)
	}
	s.bytes.Add(cw.n)
}

type countingWriter struct {
	http.ResponseWriter
	status int
	n      int64
}

func (w *countingWriter) WriteHeader(code int) { w.status = code; w.ResponseWriter.WriteHeader(code) }
func (w *countingWriter) Write(b []byte) (int, error) {
	n, err := w.ResponseWriter.Write(b)
	w.n += int64(n)
	return n, err
}

// propagationFixture is a pool leader's propagation over n AppRoutes in a
// fake cache, with two replicas serving RoutingPath on loopback addresses
// (127.0.0.2 and .3, one admin port) from tables the test sets.
type propagationFixture struct {
	p        *propagation
	cache    client.Client
	replicas []*replicaServer
	lists    atomic.Int64 // AppRoute lists: walks of the routes
	applies  atomic.Int64 // status applies
	changed  func()       // what the informers would call
	routes   int
}

func newPropagationFixture(t *testing.T, n int) *propagationFixture {
	t.Helper()
	names := groupsuffix.MustNew(groupsuffix.Default)
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := routingv1alpha1.AddToScheme(scheme, names.Group()); err != nil {
		t.Fatal(err)
	}
	f := &propagationFixture{routes: n}
	var objs []client.Object
	for i := range n {
		objs = append(objs, &routingv1alpha1.AppRoute{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: fmt.Sprintf("app-%04d", i), Generation: 1}})
	}

	// Two replicas on one port: the leader asks PodIP:adminPort.
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("no loopback address 127.0.0.2: %v", err)
	}
	_, portStr, _ := net.SplitHostPort(ln.Addr().String())
	port, _ := strconv.Atoi(portStr)
	ln2, err := net.Listen("tcp", net.JoinHostPort("127.0.0.3", portStr))
	if err != nil {
		ln.Close()
		t.Skipf("port %d not free on 127.0.0.3: %v", port, err)
	}
	for i, l := range []net.Listener{ln, ln2} {
		name := fmt.Sprintf("act-%d", i)
		rs := &replicaServer{routing: NewRouting(&fakeTable{}, name)}
		f.replicas = append(f.replicas, rs)
		srv := &http.Server{Handler: rs, ReadHeaderTimeout: time.Second}
		go srv.Serve(l)
		t.Cleanup(func() { srv.Close() })
		objs = append(objs, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ebb-system", Name: name, UID: types.UID("uid-" + name), Labels: map[string]string{"app": "activator"}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: l.Addr().(*net.TCPAddr).IP.String(),
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
		})
	}

	f.cache = fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithInterceptorFuncs(interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if _, ok := list.(*routingv1alpha1.AppRouteList); ok {
				f.lists.Add(1)
			}
			return c.List(ctx, list, opts...)
		},
	}).Build()

	// The status apply lands in the cache, whose informer would tell.
	dyn := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme())
	dyn.PrependReactor("patch", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		pa := a.(k8stesting.PatchAction)
		var body struct {
			Status routingv1alpha1.AppRouteStatus `json:"status"`
		}
		if err := json.Unmarshal(pa.GetPatch(), &body); err != nil {
			return true, nil, err
		}
		var r routingv1alpha1.AppRoute
		if err := f.cache.Get(context.Background(), types.NamespacedName{Namespace: pa.GetNamespace(), Name: pa.GetName()}, &r); err != nil {
			return true, nil, err
		}
		r.Status.Conditions, r.Status.Pools = body.Status.Conditions, body.Status.Pools
		if err := f.cache.Update(context.Background(), &r); err != nil {
			return true, nil, err
		}
		f.applies.Add(1)
		f.changed()
		return true, &unstructured.Unstructured{}, nil
	})

	c := Config{Names: names, PodName: "act-0", PodNamespace: "ebb-system", Pool: DefaultPool, ActivatorSelector: "app=activator", AdminPort: port}
	f.p = &propagation{
		names: names, log: logr.Discard(), dyn: dyn,
		src:  &sources{cfg: c, names: names, log: logr.Discard(), cache: f.cache},
		bind: &binder{cfg: c, cache: f.cache}, pool: DefaultPool, adminPort: port,
		client: &http.Client{Timeout: 2 * time.Second},
		watch: func(_ context.Context, changed func()) error {
			f.changed = changed
			return nil
		},
	}
	for _, rs := range f.replicas {
		f.serve(t, rs, nil)
	}
	return f
}

// serve sets what rs serves: every route at the generation the cache has,
// but those of gens at theirs.
func (f *propagationFixture) serve(t *testing.T, rs *replicaServer, gens map[string]int64) {
	t.Helper()
	var list routingv1alpha1.AppRouteList
	if err := f.cache.List(t.Context(), &list); err != nil {
		t.Fatal(err)
	}
	f.lists.Add(-1) // not the leader's
	var table []routing.Route[proxy.AppConfig]
	for _, r := range list.Items {
		key := routing.Key{Namespace: r.Namespace, Name: r.Name}
		g, ok := gens[key.String()]
		if !ok {
			g = r.Generation
		}
		table = append(table, routing.Route[proxy.AppConfig]{Key: key, Generation: g})
	}
	rs.routing.SetRoutes(table, nil)
}

func (f *propagationFixture) tick(t *testing.T) {
	t.Helper()
	if err := f.p.once(t.Context()); err != nil {
		t.Fatalf("propagation: %v", err)
	}
}

// propagated is the Propagated condition of route name.
func (f *propagationFixture) propagated(t *testing.T, name string) metav1.Condition {
	t.Helper()
	var r routingv1alpha1.AppRoute
	if err := f.cache.Get(t.Context(), types.NamespacedName{Namespace: "fleet", Name: name}, &r); err != nil {
		t.Fatal(err)
	}
	c := meta.FindStatusCondition(r.Status.Conditions, routingv1alpha1.ConditionPropagated)
	if c == nil {
		t.Fatalf("AppRoute fleet/%s has no Propagated condition", name)
	}
	return *c
}

type work struct{ tables, bytes, walks, applies int64 }

func (f *propagationFixture) work() work {
	var w work
	for _, rs := range f.replicas {
		w.tables += rs.tables.Load()
		w.bytes += rs.bytes.Load()
	}
	return work{w.tables, w.bytes, f.lists.Load(), f.applies.Load()}
}

func (w work) minus(v work) work {
	return work{w.tables - v.tables, w.bytes - v.bytes, w.walks - v.walks, w.applies - v.applies}
}

// A pool leader at idle does no work per route: once every route is
// Propagated, each tick asks each replica whether its table changed (a
// 304 without a body) and neither fetches a table nor walks the routes,
// however many there are. Before, each tick fetched every replica's whole
// table (40 KB each at 1,000 routes) and walked every route.
func TestPropagationIdleTickDoesNoWorkPerRoute(t *testing.T) {
	const n, ticks = 1000, 10
	f := newPropagationFixture(t, n)
	for range 3 {
		f.tick(t)
	}
	if c := f.propagated(t, "app-0007"); c.Status != metav1.ConditionTrue {
		t.Fatalf("not converged: Propagated %s %s %q", c.Status, c.Reason, c.Message)
	}
	before := f.work()
	for range ticks {
		f.tick(t)
	}
	idle := f.work().minus(before)
	t.Logf("%d idle ticks over %d routes and 2 replicas: %d tables fetched, %d bytes of body, %d walks, %d applies", ticks, n, idle.tables, idle.bytes, idle.walks, idle.applies)
	if idle.tables != 0 || idle.walks != 0 || idle.applies != 0 || idle.bytes != 0 {
		t.Errorf("idle ticks did work per route: %d tables fetched (%d bytes), %d walks of the routes, %d applies; want none", idle.tables, idle.bytes, idle.walks, idle.applies)
	}
}

// The conditions still follow the replicas: a new generation is Pending
// while one replica serves it, Propagated once both do; a replica that
// restarts with an empty table makes every route Pending; and the ticks in
// between walk only while something is Pending.
func TestPropagationFollowsReplicaVersions(t *testing.T) {
	f := newPropagationFixture(t, 50)
	for range 3 {
		f.tick(t)
	}
	var r routingv1alpha1.AppRoute
	if err := f.cache.Get(t.Context(), types.NamespacedName{Namespace: "fleet", Name: "app-0007"}, &r); err != nil {
		t.Fatal(err)
	}
	r.Generation = 2
	if err := f.cache.Update(t.Context(), &r); err != nil {
		t.Fatal(err)
	}
	if err := f.cache.Get(t.Context(), types.NamespacedName{Namespace: "fleet", Name: "app-0007"}, &r); err != nil || r.Generation != 2 {
		t.Skipf("the fake client keeps generation %d (%v)", r.Generation, err)
	}
	f.changed()
	f.tick(t)
	want := func(status metav1.ConditionStatus, reason, msg string) {
		t.Helper()
		c := f.propagated(t, "app-0007")
		if c.Status != status || c.Reason != reason || c.Message != msg || c.ObservedGeneration != 2 {
			t.Errorf("Propagated %s %s %q (generation %d), want %s %s %q (generation 2)", c.Status, c.Reason, c.Message, c.ObservedGeneration, status, reason, msg)
		}
	}
	want(metav1.ConditionFalse, "Pending", "0/2 ready activator replicas of pool default serve generation 2")

	f.serve(t, f.replicas[0], nil)
	f.tick(t)
	want(metav1.ConditionFalse, "Pending", "1/2 ready activator replicas of pool default serve generation 2")
	// Pending: the next tick walks again though nothing changed.
	before := f.work()
	f.tick(t)
	if w := f.work().minus(before); w.walks != 1 || w.tables != 0 {
		t.Errorf("a tick with a route Pending: %d walks, %d tables fetched; want 1 walk, no table", w.walks, w.tables)
	}

	f.serve(t, f.replicas[1], nil)
	f.tick(t)
	want(metav1.ConditionTrue, "AllReplicas", "2/2 ready activator replicas of pool default serve generation 2")
	f.tick(t) // its own apply's change
	before = f.work()
	f.tick(t)
	if w := f.work().minus(before); w.walks != 0 || w.tables != 0 {
		t.Errorf("settled again: %d walks, %d tables fetched; want none", w.walks, w.tables)
	}

	// A replica restarted with an empty table: its version changes.
	f.replicas[1].routing.SetRoutes(nil, nil)
	f.tick(t)
	if c := f.propagated(t, "app-0003"); c.Status != metav1.ConditionFalse || c.Reason != "Pending" {
		t.Errorf("a replica restarted with an empty table: Propagated %s %s %q, want False Pending", c.Status, c.Reason, c.Message)
	}
}

// GET RoutingPath: the table with its version as the ETag, 304 without a
// body for that version, and a new version when any generation changes.
func TestRoutingVersion(t *testing.T) {
	rt := NewRouting(&fakeTable{}, "act-0")
	set := func(gens ...int64) {
		var table []routing.Route[proxy.AppConfig]
		for i, g := range gens {
			table = append(table, routing.Route[proxy.AppConfig]{Key: routing.Key{Namespace: "fleet", Name: fmt.Sprintf("app-%d", i)}, Generation: g})
		}
		rt.SetRoutes(table, nil)
	}
	get := func(ifNoneMatch string) (int, string, Served) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, RoutingPath, nil)
		if ifNoneMatch != "" {
			req.Header.Set("If-None-Match", ifNoneMatch)
		}
		w := httptest.NewRecorder()
		rt.ServeHTTP(w, req)
		var s Served
		if w.Code == http.StatusOK {
			if err := json.Unmarshal(w.Body.Bytes(), &s); err != nil {
				t.Fatalf("body %q: %v", w.Body, err)
			}
		} else if w.Body.Len() != 0 {
			t.Errorf("%d with a body: %q", w.Code, w.Body)
		}
		return w.Code, w.Header().Get("ETag"), s
	}
	set(1, 1, 1)
	code, v1, s := get("")
	if code != http.StatusOK || v1 == "" || s.Pod != "act-0" || len(s.Routes) != 3 || s.Routes["fleet/app-1"] != 1 {
		t.Fatalf("GET: %d, ETag %q, %+v", code, v1, s)
	}
	if code, v, _ := get(v1); code != http.StatusNotModified || v != v1 {
		t.Errorf("GET If-None-Match the version: %d, ETag %q; want 304, %q", code, v, v1)
	}
	set(1, 1, 1)
	if code, _, _ := get(v1); code != http.StatusNotModified {
		t.Errorf("the same table set again: %d, want 304", code)
	}
	set(1, 2, 1)
	code, v2, s := get(v1)
	if code != http.StatusOK || v2 == v1 || s.Routes["fleet/app-1"] != 2 {
		t.Errorf("a generation changed: %d, ETag %q (was %q), %+v; want 200, a new ETag, the new table", code, v2, v1, s)
	}
}
