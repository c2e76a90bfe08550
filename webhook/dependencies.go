package webhook

import (
	"context"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
)

// policyWakesIndex indexes the cached RoutePolicies by the apps their
// wakes name, as namespace/app: the reverse edges of the dependency graph,
// so that a change to an app reaches only the apps that need it, and an
// app nothing needs costs one empty index lookup.
const policyWakesIndex = "ebb.spec.wakes"

// maxDependencies bounds an AppRoute's status.dependencies (the CRD's
// MaxItems); maxWalk the apps one walk of the graph visits and
// maxWalkReads the policies and wakes it reads (each policy counts once
// and once per wake: an app may have many superseded policies). A walk
// runs in a map function, an admission or a reconcile, and must stay cheap
// on any graph.
const (
	maxDependencies = 64
	maxWalk         = 1024
	maxWalkReads    = 17 * maxWalk
)

// appKey names an app: its namespace and its <suffix>/app label.
type appKey struct{ namespace, app string }

func (k appKey) String() string { return k.namespace + "/" + k.app }

// wakeKey is the app a wake of a policy of namespace ns names.
func wakeKey(ns string, d routingv1alpha1.Dependency) appKey {
	if d.Namespace != "" {
		ns = d.Namespace
	}
	return appKey{ns, d.App}
}

func indexWakes(o client.Object) []string {
	pol := o.(*routingv1alpha1.RoutePolicy)
	out := make([]string, 0, len(pol.Spec.Wakes))
	for _, w := range pol.Spec.Wakes {
		out = append(out, wakeKey(pol.Namespace, w).String())
	}
	return out
}

// walk reads the dependency graph from the cache for one admission,
// reconcile or map function: each app's policies are listed once (not
// deep-copied: a walk only reads them) and kept, and at most maxWalk apps
// and maxWalkReads policies and wakes are read. What lies past the bound
// is taken as having no wakes (truncated says so): cycles there are not
// seen, and admission refuses a policy whose walk is cut short.
type walk struct {
	p *policies
	// skip, when set, is a policy left out: the stored version of the one
	// being admitted.
	skip      types.NamespacedName
	pols      map[appKey][]routingv1alpha1.RoutePolicy
	out       map[appKey][]appKey
	reads     int
	truncated bool
}

func (p *policies) walk(skip types.NamespacedName) *walk {
	return &walk{p: p, skip: skip, pols: map[appKey][]routingv1alpha1.RoutePolicy{}, out: map[appKey][]appKey{}}
}

// policiesOf are k's policies, oldest first (forApp), listed once per walk.
// They are the cache's own objects: read them, never change them.
func (w *walk) policiesOf(ctx context.Context, k appKey) ([]routingv1alpha1.RoutePolicy, error) {
	if all, ok := w.pols[k]; ok {
		return all, nil
	}
	all, err := w.p.forApp(ctx, k.namespace, k.app, client.UnsafeDisableDeepCopy)
	if err != nil {
		return nil, err
	}
	w.pols[k] = all
	return all, nil
}

// edges are the apps k's policies name in their wakes, in their order,
// every policy naming k counted (a superseded policy becomes the app's
// when the older one goes, so its wakes must not close a cycle either);
// none past the walk's bound.
func (w *walk) edges(ctx context.Context, k appKey) ([]appKey, error) {
	if out, ok := w.out[k]; ok {
		return out, nil
	}
	if len(w.out) >= maxWalk || w.reads >= maxWalkReads {
		w.truncated = true
		return nil, nil
	}
	all, err := w.policiesOf(ctx, k)
	if err != nil {
		return nil, err
	}
	var out []appKey
	for i := range all {
		if all[i].Namespace == w.skip.Namespace && all[i].Name == w.skip.Name {
			continue
		}
		if w.reads += 1 + len(all[i].Spec.Wakes); w.reads > maxWalkReads {
			w.truncated = true
			break
		}
		for _, d := range all[i].Spec.Wakes {
			if wk := wakeKey(k.namespace, d); !slices.Contains(out, wk) {
				out = append(out, wk)
			}
		}
	}
	w.out[k] = out
	return out, nil
}

// cycleThrough is the shortest cycle of the dependency graph through
// start, whose own edges are first, as start → … → start; nil if there is
// none. Cycles elsewhere in the graph are not start's to answer for. The
// walk is breadth first, each app's wakes in their order, so the cycle
// named is the same every time.
func (w *walk) cycleThrough(ctx context.Context, start appKey, first []appKey) ([]appKey, error) {
	parent := map[appKey]appKey{}
	queue := make([]appKey, 0, len(first))
	for _, k := range first {
		if k == start {
			return []appKey{start, start}, nil
		}
		if _, seen := parent[k]; !seen {
			parent[k] = start
			queue = append(queue, k)
		}
	}
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		next, err := w.edges(ctx, n)
		if err != nil {
			return nil, err
		}
		for _, k := range next {
			if k == start {
				path := []appKey{start}
				for at := n; at != start; at = parent[at] {
					path = append(path, at)
				}
				slices.Reverse(path[1:])
				return append(path, start), nil
			}
			if _, seen := parent[k]; !seen {
				parent[k] = n
				queue = append(queue, k)
			}
		}
	}
	return nil, nil
}

// onCycle says of every app reached from root (within the walk's bound)
// whether it is on a cycle: whether its wakes lead, through others, back
// to it. One depth-first walk (Tarjan's strongly connected components)
// answers for all of them, each app's edges read once: an app is on a
// cycle when its component has another app, or it wakes itself.
func (w *walk) onCycle(ctx context.Context, root appKey) (map[appKey]bool, error) {
	type frame struct {
		k    appKey
		next []appKey
	}
	index := map[appKey]int{}
	low := map[appKey]int{}
	onStack := map[appKey]bool{}
	var stack []appKey
	cyclic := map[appKey]bool{}
	var frames []frame
	push := func(k appKey) error {
		next, err := w.edges(ctx, k)
		if err != nil {
			return err
		}
		index[k], low[k] = len(index), len(index)
		stack = append(stack, k)
		onStack[k] = true
		if slices.Contains(next, k) {
			cyclic[k] = true
		}
		frames = append(frames, frame{k, next})
		return nil
	}
	if err := push(root); err != nil {
		return nil, err
	}
	for len(frames) > 0 {
		f := &frames[len(frames)-1]
		if len(f.next) > 0 {
			c := f.next[0]
			f.next = f.next[1:]
			if _, seen := index[c]; !seen {
				if err := push(c); err != nil {
					return nil, err
				}
			} else if onStack[c] {
				low[f.k] = min(low[f.k], index[c])
			}
			continue
		}
		k := f.k
		frames = frames[:len(frames)-1]
		if len(frames) > 0 {
			parent := frames[len(frames)-1].k
			low[parent] = min(low[parent], low[k])
		}
		if low[k] != index[k] {
			continue
		}
		i := len(stack) - 1
		for stack[i] != k {
			i--
		}
		for _, m := range stack[i:] {
			onStack[m] = false
			if len(stack)-i > 1 {
				cyclic[m] = true
			}
		}
		stack = stack[:i]
	}
	return cyclic, nil
}

// cycleMessage names a cycle and its fix, as a user sees it.
func cycleMessage(cycle []appKey) string {
	names := make([]string, len(cycle))
	for i, k := range cycle {
		names[i] = k.String()
	}
	return fmt.Sprintf("spec.wakes: %s is a cycle: an app cannot need, through others, itself; remove one of these wakes", strings.Join(names, " → "))
}

// policyCycle is the cycle pol's wakes close with the cluster's other
// RoutePolicies, nil if none. Admission refuses such a policy; two created
// at once each pass admission without the other, and this catches them.
func (p *policies) policyCycle(ctx context.Context, pol *routingv1alpha1.RoutePolicy) ([]appKey, error) {
	if len(pol.Spec.Wakes) == 0 {
		return nil, nil
	}
	w := p.walk(types.NamespacedName{})
	start := appKey{pol.Namespace, pol.Spec.App}
	first, err := w.edges(ctx, start)
	if err != nil {
		return nil, err
	}
	return w.cycleThrough(ctx, start, first)
}

// permitted says whether an app of namespace from may wake app k: always
// in its own namespace; in another only if k's RoutePolicy lists from in
// spec.wakeableFrom, so that no namespace wakes (and keeps up) another's
// apps unasked.
func (w *walk) permitted(ctx context.Context, from string, k appKey) (bool, error) {
	if k.namespace == from {
		return true, nil
	}
	all, err := w.policiesOf(ctx, k)
	if err != nil || len(all) == 0 {
		return false, err
	}
	return slices.Contains(all[0].Spec.WakeableFrom, from), nil
}

// withWakes copies pol's permitted wakes into route's spec, each with its
// namespace, and its wakeOrder (Together when unset). None is copied while
// pol's wakes close a cycle (its Accepted condition names it): an app that
// needs itself would never be released, nor go to zero. Which wake of a
// cycle "closes" it depends on the order policies were made in; leaving
// out every wake of the policies on it is the same on every replica.
func (p *policies) withWakes(ctx context.Context, route *routingv1alpha1.AppRoute, pol *routingv1alpha1.RoutePolicy) error {
	if len(pol.Spec.Wakes) == 0 {
		return nil
	}
	w := p.walk(types.NamespacedName{})
	start := appKey{pol.Namespace, pol.Spec.App}
	cyclic, err := w.onCycle(ctx, start)
	if err != nil || cyclic[start] {
		return err
	}
	for _, wake := range pol.Spec.Wakes {
		k := wakeKey(pol.Namespace, wake)
		ok, err := w.permitted(ctx, pol.Namespace, k)
		if err != nil {
			return err
		}
		d := routingv1alpha1.Dependency{App: k.app, Namespace: k.namespace}
		if ok && !slices.Contains(route.Spec.Wakes, d) { // a duplicate admitted while the webhook was not yet installed
			route.Spec.Wakes = append(route.Spec.Wakes, d)
		}
	}
	if len(route.Spec.Wakes) > 0 {
		route.Spec.WakeOrder = pol.Spec.WakeOrder
		if route.Spec.WakeOrder == "" {
			route.Spec.WakeOrder = routingv1alpha1.WakeTogether
		}
	}
	return nil
}

// dependencies is the status.dependencies of the AppRoute of app root:
// its wakes and theirs, breadth first, one entry per app (the first path
// to it wins), at most maxDependencies. Each app's wakes are its
// RoutePolicy's, so a wake another namespace does not permit is shown
// (NotPermitted) though it is not in spec.wakes; such an app and a Missing
// one are not walked further, nor the wakes of a policy on a cycle (none
// of them is copied). All reads are from the cache, each app's policies
// listed once: one walk of the graph from root says which apps are on a
// cycle (onCycle), and the tree is built from what it read.
func (r *routeReconciler) dependencies(ctx context.Context, root appKey) ([]routingv1alpha1.DependencyStatus, error) {
	if r.routes.policies == nil {
		return nil, nil
	}
	pols := r.routes.policies.walk(types.NamespacedName{})
	cyclic, err := pols.onCycle(ctx, root)
	if err != nil {
		return nil, err
	}
	type node struct {
		key      appKey
		children []appKey
		ordered  bool
	}
	var out []routingv1alpha1.DependencyStatus
	var nodes []node
	state := map[appKey]routingv1alpha1.DependencyState{}
	seen := map[appKey]bool{root: true}
	queue := []appKey{root}
	for len(queue) > 0 {
		parent := queue[0]
		queue = queue[1:]
		all, err := pols.policiesOf(ctx, parent)
		if err != nil {
			return nil, err
		}
		// An app whose wakes close a cycle wakes none of them (withWakes).
		if len(all) == 0 || cyclic[parent] {
			continue
		}
		pol := &all[0]
		n := node{key: parent, ordered: pol.Spec.WakeOrder == routingv1alpha1.WakeOrdered}
		for _, w := range pol.Spec.Wakes {
			k := wakeKey(parent.namespace, w)
			n.children = append(n.children, k)
			if seen[k] || len(out) >= maxDependencies {
				continue
			}
			seen[k] = true
			d := routingv1alpha1.DependencyStatus{App: k.app, Namespace: k.namespace, NeededBy: parent.String()}
			ok, err := pols.permitted(ctx, parent.namespace, k)
			if err != nil {
				return nil, err
			}
			if !ok {
				d.State = routingv1alpha1.DependencyNotPermitted
			} else if err := r.dependencyState(ctx, k, &d); err != nil {
				return nil, err
			}
			state[k] = d.State
			out = append(out, d)
			if d.State != routingv1alpha1.DependencyNotPermitted && d.State != routingv1alpha1.DependencyMissing {
				queue = append(queue, k)
			}
		}
		nodes = append(nodes, n)
	}
	// What each waits on: its dependencies first when it wakes in order.
	for i := range out {
		d := &out[i]
		if d.State != routingv1alpha1.DependencyAtZero && d.State != routingv1alpha1.DependencyWaking {
			continue
		}
		d.WaitingOn = "a ready pod"
		k := appKey{d.Namespace, d.App}
		for _, n := range nodes {
			if n.key != k || !n.ordered {
				continue
			}
			for _, c := range n.children {
				if s, ok := state[c]; ok && s != routingv1alpha1.DependencyReady {
					d.WaitingOn = "its dependency " + c.String()
					break
				}
			}
		}
	}
	return out, nil
}

// dependencyState fills d's state and ready endpoints from k's AppRoute
// (its readyEndpoints, which the route controller keeps) and, with none
// ready, the replicas of the workload its scaleTargetRef names, of any
// kind routed (workloads.get): Waking once scaled up (or unset, the kind's
// default), AtZero at zero or when the workload is gone or not served.
func (r *routeReconciler) dependencyState(ctx context.Context, k appKey, d *routingv1alpha1.DependencyStatus) error {
	var route routingv1alpha1.AppRoute
	err := r.routes.client.Get(ctx, types.NamespacedName{Namespace: k.namespace, Name: k.app}, &route)
	switch {
	case apierrors.IsNotFound(err):
		d.State = routingv1alpha1.DependencyMissing
		return nil
	case err != nil:
		return fmt.Errorf("get AppRoute %s: %w", k, err)
	}
	d.ReadyEndpoints = route.Status.ReadyEndpoints
	if d.ReadyEndpoints > 0 {
		d.State = routingv1alpha1.DependencyReady
		return nil
	}
	d.State = routingv1alpha1.DependencyAtZero
	req, ok := targetRequest(&route)
	if !ok {
		return nil
	}
	w, err := r.workloads.get(ctx, req)
	if err != nil {
		return fmt.Errorf("get the workload of AppRoute %s: %w", k, err)
	}
	if w != nil && (w.Replicas == nil || *w.Replicas > 0) {
		d.State = routingv1alpha1.DependencyWaking
	}
	return nil
}

// dependents are the apps that need k, directly or through others (at
// most maxWalk, from at most maxWalkReads policies), from the
// RoutePolicies' wakes index, not deep-copied: none for an app nothing
// needs.
func (p *policies) dependents(ctx context.Context, k appKey) []appKey {
	var out []appKey
	seen := map[appKey]bool{k: true}
	queue := []appKey{k}
	reads := 0
	for len(queue) > 0 && len(seen) < maxWalk && reads < maxWalkReads {
		n := queue[0]
		queue = queue[1:]
		var list routingv1alpha1.RoutePolicyList
		if err := p.client.List(ctx, &list, client.MatchingFields{policyWakesIndex: n.String()}, client.UnsafeDisableDeepCopy); err != nil {
			return out // the cache's List fails only on a missing index
		}
		reads += len(list.Items)
		for _, pol := range list.Items {
			d := appKey{pol.Namespace, pol.Spec.App}
			if !seen[d] {
				seen[d] = true
				out = append(out, d)
				queue = append(queue, d)
			}
		}
	}
	return out
}

// routesNeeding maps an object about app k to the route controller's
// requests of the apps that need k.
func (r *routeReconciler) routesNeeding(ctx context.Context, k appKey) []reconcile.Request {
	var reqs []reconcile.Request
	for _, d := range r.routes.policies.dependents(ctx, k) {
		reqs = append(reqs, r.claimants(ctx, d.namespace, d.app, "")...)
	}
	return reqs
}

// Map functions for the route controller's dependency watches.

// dependentsOfWorkload maps a workload of any kind routed to the apps that
// need its app: status.dependencies shows whether it is scaled up. Only a
// workload whose app something needs brings work (one index lookup else).
func (r *routeReconciler) dependentsOfWorkload(ctx context.Context, o client.Object) []reconcile.Request {
	_, labels := templateLabels(o)
	app, ok := labels[r.routes.names.AppLabel()]
	if !ok {
		return nil
	}
	return r.routesNeeding(ctx, appKey{o.GetNamespace(), app})
}

func (r *routeReconciler) dependentsOfRoute(ctx context.Context, o client.Object) []reconcile.Request {
	return r.routesNeeding(ctx, appKey{o.GetNamespace(), o.GetName()})
}

func (r *routeReconciler) dependentsOfPolicy(ctx context.Context, o client.Object) []reconcile.Request {
	return r.routesNeeding(ctx, appKey{o.GetNamespace(), o.(*routingv1alpha1.RoutePolicy).Spec.App})
}

// readinessChanged lets through an AppRoute's creation and deletion, a
// change of its spec (its wakes) and of its ready endpoints: what the
// status.dependencies of the apps that need it show. The other status
// writes (conditions, lastColdStart) do not pass.
var readinessChanged = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	old, ok1 := e.ObjectOld.(*routingv1alpha1.AppRoute)
	cur, ok2 := e.ObjectNew.(*routingv1alpha1.AppRoute)
	return !ok1 || !ok2 || old.Generation != cur.Generation || old.Status.ReadyEndpoints != cur.Status.ReadyEndpoints
}}

// policiesNeeding maps a RoutePolicy to the policies with wakes of the
// apps that need its app: a change to its wakes may close or open a cycle
// through them (a policy without wakes closes none). It reads the cache
// without copying: one index lookup per app.
func (r *policyReconciler) policiesNeeding(ctx context.Context, o client.Object) []reconcile.Request {
	pol := o.(*routingv1alpha1.RoutePolicy)
	var reqs []reconcile.Request
	for _, d := range r.policies.dependents(ctx, appKey{pol.Namespace, pol.Spec.App}) {
		all, err := r.policies.forApp(ctx, d.namespace, d.app, client.UnsafeDisableDeepCopy)
		if err != nil {
			continue // the cache's List fails only on a missing index
		}
		for i := range all {
			if len(all[i].Spec.Wakes) == 0 {
				continue
			}
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: all[i].Namespace, Name: all[i].Name}})
		}
	}
	return reqs
}
