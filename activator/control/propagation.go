package control

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	toolscache "k8s.io/client-go/tools/cache"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ebb-dev/ebb/activator/proxy"
	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/internal/routing"
)

// RoutingPath on the admin port reports what this replica serves: Served,
// with its version as the ETag; a GET whose If-None-Match is the version
// of the table served is answered 304 with no body.
const RoutingPath = "/routing"

// Served is the body of GET RoutingPath: the generation of every AppRoute
// ("namespace/name") in the replica's routing table.
type Served struct {
	Pod    string           `json:"pod"`
	Routes map[string]int64 `json:"routes"`
}

// ServingTable is a Table that lists what it serves (proxy.Router).
type ServingTable interface {
	Table
	Served() map[string]int64
}

// Routing is the table the control loops feed, and the handler of GET
// RoutingPath. It keeps the version of what the table serves (a hash of
// every AppRoute and generation, servedVersion) at each SetRoutes, so that
// the pool leader's question each second, "still the version I have?",
// costs the same for 1 route or 10,000: a 304 without a body.
type Routing struct {
	ServingTable
	pod     string
	version atomic.Pointer[string]
}

// NewRouting returns t with its version, serving RoutingPath as pod.
func NewRouting(t ServingTable, pod string) *Routing {
	return &Routing{ServingTable: t, pod: pod}
}

// SetRoutes replaces the table, then its version.
func (r *Routing) SetRoutes(routes []routing.Route[proxy.AppConfig], claims routing.Claims) {
	r.ServingTable.SetRoutes(routes, claims)
	v := servedVersion(r.Served())
	r.version.Store(&v)
}

// ServeHTTP answers GET RoutingPath. The version kept lags the table by at
// most a SetRoutes in progress, and a full answer's ETag is the version of
// its own body: a leader never holds an older table under a newer version.
func (r *Routing) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if v := r.version.Load(); v != nil && req.Header.Get("If-None-Match") == *v {
		w.Header().Set("ETag", *v)
		w.WriteHeader(http.StatusNotModified)
		return
	}
	routes := r.Served()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("ETag", servedVersion(routes))
	json.NewEncoder(w).Encode(Served{Pod: r.pod, Routes: routes})
}

// servedVersion is a strong ETag naming routes: a hash of every key and
// generation, in key order.
func servedVersion(routes map[string]int64) string {
	h := sha256.New()
	var b []byte
	for _, k := range slices.Sorted(maps.Keys(routes)) {
		b = strconv.AppendInt(append(append(b[:0], k...), ' '), routes[k], 10)
		h.Write(append(b, '\n'))
	}
	return `"` + hex.EncodeToString(h.Sum(nil)[:16]) + `"`
}

// propagation is run by the elected replica of each pool: it asks every
// ready activator pod of its pool which AppRoute generations it serves
// and, on each AppRoute the pool admits, sets the Admitted and Propagated
// conditions and the pool's entry in status.pools (Propagated true only
// when every ready replica of the pool serves the AppRoute's current
// generation). The default pool's also marks the routes no pool admits
// (Admitted false, with why).
//
// What it costs at idle does not grow with the routes: each second it asks
// every replica whether its table is still the version it last fetched
// (If-None-Match: a 304 without a body), and fetches a table and walks the
// routes only when a replica's version changed, the ready replicas
// changed, an AppRoute, the pools ConfigMap or a Namespace changed (events
// of the cache's informers, counted), or the last walk left a route
// Pending or failed.
type propagation struct {
	names     groupsuffix.Names
	log       logr.Logger
	dyn       dynamic.Interface
	src       *sources
	bind      *binder
	pool      string
	adminPort int
	client    *http.Client
	// watch calls changed on each change of what a walk reads besides the
	// replicas' tables; nil: the cache's informers (watchCache).
	watch func(ctx context.Context, changed func()) error

	mu       sync.Mutex // one reconcile at a time, across leadership terms
	watching bool       // changes are counted: a walk may be skipped
	changes  atomic.Uint64
	replicas map[types.UID]*replicaTable // the tables last fetched, by pod
	last     *walked                     // nil: walk next time
}

// replicaTable is what a replica served when last asked.
type replicaTable struct {
	ip      string
	version string // its ETag; "" (a replica without one): fetch each time
	routes  map[string]int64
}

// walked is what the last walk of the routes read: a walk with the same
// would write nothing.
type walked struct {
	changes uint64 // changes counted before it
	pods    string // the ready replicas, and their addresses
}

// propagationDelay lets the replicas take a change in before they are asked.
const propagationDelay = 100 * time.Millisecond

// Reconcile asks the replicas and writes the conditions, on each change
// (after propagationDelay) and every second.
func (p *propagation) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.once(ctx); err != nil && ctx.Err() == nil {
		p.log.Error(err, "propagation status not fully written; retrying")
	}
	return reconcile.Result{RequeueAfter: time.Second}, nil
}

func (p *propagation) once(ctx context.Context) error {
	if ps, err := p.bind.current(ctx); len(ps) == 0 {
		return fmt.Errorf("no activator pools known, route status left as it is: %w", err)
	}
	if !p.watching {
		p.startWatch(ctx)
	}
	changes := p.changes.Load() // before anything the walk reads
	listed, err := p.src.activatorPods(ctx)
	if err != nil {
		return err
	}
	var pods []*corev1.Pod
	var podsSeen strings.Builder
	for i := range listed {
		if pod := &listed[i]; podReady(pod) && pod.DeletionTimestamp == nil && pod.Status.PodIP != "" {
			pods = append(pods, pod)
		}
	}
	slices.SortFunc(pods, func(a, b *corev1.Pod) int { return strings.Compare(string(a.UID), string(b.UID)) })
	for _, pod := range pods {
		fmt.Fprintf(&podsSeen, "%s=%s,", pod.UID, pod.Status.PodIP)
	}
	tables := make([]*replicaTable, len(pods))
	fresh := make([]bool, len(pods))
	errs := make([]error, len(pods))
	var wg sync.WaitGroup
	for i, pod := range pods {
		last := p.replicas[pod.UID]
		wg.Go(func() { tables[i], fresh[i], errs[i] = p.fetch(ctx, pod, last) })
	}
	wg.Wait()
	now := &walked{changes: changes, pods: podsSeen.String()}
	same := p.watching && p.last != nil && *p.last == *now
	p.replicas = make(map[types.UID]*replicaTable, len(pods))
	for i, pod := range pods {
		if errs[i] != nil {
			same = false // counted as not serving: Pending, and asked in full again
			continue
		}
		p.replicas[pod.UID] = tables[i]
		if fresh[i] {
			same = false
		}
	}
	if same {
		return nil
	}
	p.last = nil
	settled := true
	var all []error
	for _, r := range p.src.cachedRoutes(ctx) {
		pool, why := p.bind.admit(ctx, r)
		var want []metav1.Condition
		switch {
		case pool == p.pool:
			key := r.Namespace + "/" + r.Name
			have := 0
			for i := range pods {
				if errs[i] == nil && tables[i].routes[key] == r.Generation {
					have++
				}
			}
			prop := metav1.Condition{Type: routingv1alpha1.ConditionPropagated, ObservedGeneration: r.Generation}
			switch {
			case len(pods) == 0:
				prop.Status, prop.Reason, prop.Message = metav1.ConditionFalse, "NoReadyActivator", "no ready activator replica of pool "+p.pool+" serves the routing table"
			case have == len(pods):
				prop.Status, prop.Reason = metav1.ConditionTrue, "AllReplicas"
				prop.Message = fmt.Sprintf("%d/%d ready activator replicas of pool %s serve generation %d", have, len(pods), p.pool, r.Generation)
			default:
				settled = false
				prop.Status, prop.Reason = metav1.ConditionFalse, "Pending"
				prop.Message = fmt.Sprintf("%d/%d ready activator replicas of pool %s serve generation %d", have, len(pods), p.pool, r.Generation)
			}
			want = []metav1.Condition{
				{Type: routingv1alpha1.ConditionAdmitted, Status: metav1.ConditionTrue, Reason: "Selected", Message: why, ObservedGeneration: r.Generation},
				prop,
			}
		case pool == "" && p.pool == DefaultPool:
			want = []metav1.Condition{
				{Type: routingv1alpha1.ConditionAdmitted, Status: metav1.ConditionFalse, Reason: "NoPoolSelects", Message: why, ObservedGeneration: r.Generation},
				{Type: routingv1alpha1.ConditionPropagated, Status: metav1.ConditionFalse, Reason: "NotAdmitted", Message: "no activator pool admits the route: see Admitted", ObservedGeneration: r.Generation},
			}
		default:
			continue // another pool's route, or none's and the default pool says so
		}
		if p.upToDate(r, pool, want) {
			continue
		}
		if err := p.apply(ctx, r, pool, want); err != nil {
			all = append(all, err)
		}
	}
	if settled && len(all) == 0 {
		p.last = now // a replica not answering leaves routes Pending: not settled
	}
	return errors.Join(all...)
}

// startWatch counts the changes of AppRoutes and, with a pools ConfigMap,
// of ConfigMaps and Namespaces, for as long as the process runs (one
// handler each, whatever the terms); until it has, every reconcile walks.
func (p *propagation) startWatch(ctx context.Context) {
	watch := p.watch
	if watch == nil {
		watch = p.watchCache
	}
	if err := watch(ctx, func() { p.changes.Add(1) }); err != nil {
		p.log.Error(err, "changes not counted: the routes are walked every second")
		return
	}
	p.watching = true
}

// watchCache calls changed on each change of the cache's objects that a
// walk reads besides the replicas' tables.
func (p *propagation) watchCache(ctx context.Context, changed func()) error {
	informers, ok := p.src.cache.(crcache.Informers)
	if !ok {
		return fmt.Errorf("the cache (%T) has no informers", p.src.cache)
	}
	objs := append([]client.Object{&routingv1alpha1.AppRoute{}}, poolObjects(p.src.cfg)...)
	for _, obj := range objs {
		inf, err := informers.GetInformer(ctx, obj)
		if err != nil {
			return fmt.Errorf("watch %T: %w", obj, err)
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { changed() },
			UpdateFunc: func(any, any) { changed() },
			DeleteFunc: func(any) { changed() },
		}); err != nil {
			return fmt.Errorf("watch %T: %w", obj, err)
		}
	}
	return nil
}

// upToDate reports whether r's status already has the conditions want
// (top level and, when pool is set, as the only entry of status.pools);
// it sets their transition times from r's where the status is unchanged.
func (p *propagation) upToDate(r *routingv1alpha1.AppRoute, pool string, want []metav1.Condition) bool {
	same := true
	var entry []metav1.Condition
	if len(r.Status.Pools) == 1 && r.Status.Pools[0].Name == pool {
		entry = r.Status.Pools[0].Conditions
	} else if len(r.Status.Pools) > 0 || pool != "" {
		same = false
	}
	now := metav1.Now()
	for i := range want {
		c := &want[i]
		c.LastTransitionTime = now
		old := meta.FindStatusCondition(r.Status.Conditions, c.Type)
		if old != nil && old.Status == c.Status {
			c.LastTransitionTime = old.LastTransitionTime
		}
		if old == nil || old.Status != c.Status || old.Reason != c.Reason || old.Message != c.Message || old.ObservedGeneration != c.ObservedGeneration {
			same = false
		}
		if pool != "" {
			if e := meta.FindStatusCondition(entry, c.Type); e == nil || e.Status != c.Status || e.Reason != c.Reason || e.Message != c.Message || e.ObservedGeneration != c.ObservedGeneration {
				same = false
			}
		}
	}
	return same
}

// fetch asks pod what it serves, sending the version of last (what it
// served when last asked, nil if never) as If-None-Match; fresh reports a
// table that is not last's.
func (p *propagation) fetch(ctx context.Context, pod *corev1.Pod, last *replicaTable) (t *replicaTable, fresh bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	url := "http://" + net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(p.adminPort)) + RoutingPath
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, false, fmt.Errorf("ask activator %s: %w", pod.Name, err)
	}
	if last != nil && (last.ip != pod.Status.PodIP || last.version == "") {
		last = nil
	}
	if last != nil {
		req.Header.Set("If-None-Match", last.version)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, false, fmt.Errorf("ask activator %s: %w", pod.Name, err)
	}
	defer resp.Body.Close()
	if last != nil && resp.StatusCode == http.StatusNotModified {
		return last, false, nil
	}
	if resp.StatusCode != http.StatusOK {
		return nil, false, fmt.Errorf("ask activator %s: %s", pod.Name, resp.Status)
	}
	var s Served
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		return nil, false, fmt.Errorf("ask activator %s: %w", pod.Name, err)
	}
	t = &replicaTable{ip: pod.Status.PodIP, version: resp.Header.Get("ETag"), routes: s.Routes}
	return t, last == nil || t.version == "" || t.version != last.version, nil
}

// apply writes the Admitted and Propagated conditions and status.pools
// (the admitting pool's entry, or none) by server-side apply on the status
// subresource under FieldManager, which every pool shares: the pool that
// admits a route replaces the entry of the one that did before, and the
// webhook's and scalers' conditions and fields are left alone.
func (p *propagation) apply(ctx context.Context, r *routingv1alpha1.AppRoute, pool string, conds []metav1.Condition) error {
	entries := []routingv1alpha1.PoolStatus{}
	if pool != "" {
		entries = append(entries, routingv1alpha1.PoolStatus{Name: pool, Conditions: conds})
	}
	body, err := json.Marshal(map[string]any{
		"apiVersion": routingv1alpha1.GroupVersion(p.names.Group()).String(),
		"kind":       routingv1alpha1.Kind,
		"metadata":   map[string]any{"name": r.Name, "namespace": r.Namespace},
		"status":     map[string]any{"conditions": conds, "pools": entries},
	})
	if err != nil {
		return fmt.Errorf("encode the pool status of AppRoute %s/%s: %w", r.Namespace, r.Name, err)
	}
	force := true
	_, err = p.dyn.Resource(routingv1alpha1.GroupVersionResource(p.names.Group())).Namespace(r.Namespace).
		Patch(ctx, r.Name, types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: FieldManager, Force: &force}, "status")
	if err != nil {
		return fmt.Errorf("apply the pool status of AppRoute %s/%s: %w", r.Namespace, r.Name, err)
	}
	return nil
}
