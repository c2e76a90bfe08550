package proxy

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ebb-dev/ebb/internal/routing"
)

// Dependencies (issue 31): an app whose AppRoute names wakes holds its
// requests until it has a ready pod and so has every app of its
// transitive closure (the wakes of its wakes, read from their own
// AppRoutes). While it holds, each app of the closure is told to the
// scalers as held (count: the dependents waiting on it, added to its own
// held requests) so that KEDA scales it up; Ordered tells an app only
// once every app it needs has a ready pod, the dependent's own hold
// included: every app of the closure when the app holding is Ordered, and
// an Ordered app of the closure whatever the app holding says (Ordered is
// the app's own need: it fails at start without its wakes). Once the
// dependent's requests are released the scaler keeps its dependencies up
// itself (it counts an app active while a dependent has a live pod), so
// these holds drop then.
//
// All of it runs in one goroutine started on demand (depState.kick), off
// the request path: an app without wakes pays one atomic load per
// routing decision (app.depsWait) and nothing else.

// Wakes are the apps an app needs woken with it: its AppRoute's
// spec.wakes, each with its namespace, and spec.wakeOrder.
type Wakes struct {
	Apps []routing.Key
	// Ordered tells an app to the scalers only once every app it needs
	// has a ready pod; otherwise every app is told at once.
	Ordered bool
}

// ordered reports whether w is Ordered; false for no wakes.
func (w *Wakes) ordered() bool { return w != nil && w.Ordered }

func (w *Wakes) equal(o *Wakes) bool {
	return w.Ordered == o.Ordered && slices.Equal(w.Apps, o.Apps)
}

// depState is the Router's dependency bookkeeping.
type depState struct {
	mu      sync.Mutex // guards waiting; a leaf lock (taken under app.mu)
	waiting map[*app]struct{}
	// nWaiting is len(waiting), read without the lock on endpoint changes.
	nWaiting atomic.Int64

	pending, running atomic.Bool
	// touched are the apps the last recompute gave a dependency hold, a
	// gate or a wait; owned by the recompute goroutine.
	touched map[*app]struct{}
}

// waitOn notes that a, an app with wakes, holds requests. Callers hold a.mu.
func (rt *Router) waitOn(a *app) {
	a.depsWait.Store(true) // until the recompute has seen its closure ready
	d := &rt.deps
	d.mu.Lock()
	if d.waiting == nil {
		d.waiting = map[*app]struct{}{}
	}
	d.waiting[a] = struct{}{}
	d.nWaiting.Store(int64(len(d.waiting)))
	d.mu.Unlock()
	rt.kickDeps()
}

// stopWaiting notes that a holds no request any more. Callers hold a.mu.
func (rt *Router) stopWaiting(a *app) {
	d := &rt.deps
	d.mu.Lock()
	_, ok := d.waiting[a]
	delete(d.waiting, a)
	d.nWaiting.Store(int64(len(d.waiting)))
	d.mu.Unlock()
	if ok {
		rt.kickDeps()
	}
}

// isWaiting reports whether a holds requests and has wakes (it is in
// waiting). Callers hold a.mu.
func (rt *Router) isWaiting(a *app) bool {
	d := &rt.deps
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.waiting[a]
	return ok
}

// kickDeps asks for a recompute of the dependency holds; it never blocks.
func (rt *Router) kickDeps() {
	d := &rt.deps
	d.pending.Store(true)
	if d.running.CompareAndSwap(false, true) {
		go rt.runDeps()
	}
}

func (rt *Router) runDeps() {
	d := &rt.deps
	for {
		for d.pending.Swap(false) {
			rt.recomputeDeps()
		}
		d.running.Store(false)
		if !d.pending.Load() || !d.running.CompareAndSwap(false, true) {
			return
		}
	}
}

// depGraph is an app's closure: node 0 is the app, needs[i] the nodes
// node i needs, edges that close a cycle left out (so Ordered still
// wakes in some order, and nothing loops).
type depGraph struct {
	keys  []routing.Key
	apps  []*app // nil: no AppRoute
	needs [][]int
}

// closureLocked returns root's closure. Callers hold rt.mu.
func (rt *Router) closureLocked(root *app) depGraph {
	var g depGraph
	const onStack, done = 1, 2
	state := map[routing.Key]int{}
	index := map[routing.Key]int{}
	var visit func(k routing.Key, a *app) int
	visit = func(k routing.Key, a *app) int {
		i := len(g.keys)
		index[k], state[k] = i, onStack
		g.keys, g.apps, g.needs = append(g.keys, k), append(g.apps, a), append(g.needs, nil)
		if a != nil {
			if w := a.cfg.Load().Wakes; w != nil {
				for _, dk := range w.Apps {
					switch state[dk] {
					case onStack: // a cycle: the webhook refuses them, but two policies may race
						continue
					case done:
						g.needs[i] = append(g.needs[i], index[dk])
						continue
					}
					da := rt.apps[dk]
					if da != nil && da.gone.Load() {
						da = nil
					}
					j := visit(dk, da)
					g.needs[i] = append(g.needs[i], j)
				}
			}
		}
		state[k] = done
		return i
	}
	visit(root.key, root)
	return g
}

// up reports whether node i has a ready endpoint.
func (g *depGraph) up(i int) bool {
	a := g.apps[i]
	return a != nil && len(a.eps.Load().ready) > 0
}

// notUp names the first app of the closure (the app itself left out)
// without a ready endpoint, and why; "" if every one has one.
func (g *depGraph) notUp() string {
	for i := 1; i < len(g.keys); i++ {
		if g.apps[i] == nil {
			return fmt.Sprintf("%s, which has no AppRoute", g.keys[i])
		}
		if !g.up(i) {
			return fmt.Sprintf("%s, which has no ready pod", g.keys[i])
		}
	}
	return ""
}

// depEffect is what a recompute sets on one app.
type depEffect struct {
	held  int64 // dependents waiting on it
	gated bool  // its own hold not told yet (Ordered)
	wait  bool  // its held requests wait on a dependency
	root  bool  // it holds requests and has wakes
	// snapped: it was waiting when the recompute read the waiting apps.
	snapped bool
}

// recomputeDeps recomputes, from the apps holding requests that have
// wakes, every app's dependency hold, gate and wait, pushes the counts
// that changed, and releases the requests whose closure is up.
func (rt *Router) recomputeDeps() {
	d := &rt.deps
	d.mu.Lock()
	waiting := make([]*app, 0, len(d.waiting))
	for a := range d.waiting {
		waiting = append(waiting, a)
	}
	d.mu.Unlock()

	effects := map[*app]*depEffect{}
	effect := func(a *app) *depEffect {
		e := effects[a]
		if e == nil {
			e = &depEffect{}
			effects[a] = e
		}
		return e
	}
	rt.mu.Lock()
	for _, a := range waiting {
		effect(a).snapped = true
		w := a.cfg.Load().Wakes
		if w == nil {
			continue
		}
		g := rt.closureLocked(a)
		ready := func(i int) bool {
			for _, j := range g.needs[i] {
				if !g.up(j) {
					return false
				}
			}
			return true
		}
		root := effect(a)
		root.root = true
		root.wait = g.notUp() != ""
		root.gated = w.Ordered && !ready(0)
		for i := 1; i < len(g.keys); i++ {
			// Ordered is the root's wish for its whole closure, and each
			// app's own need (it fails at start without its wakes).
			if da := g.apps[i]; da != nil && (ready(i) || !w.Ordered && !da.cfg.Load().Wakes.ordered()) {
				effect(da).held++
			}
		}
	}
	rt.mu.Unlock()

	now := time.Now()
	var release []*app
	var records []ColdStartRecord
	apply := func(a *app, e depEffect) {
		a.mu.Lock()
		if !e.snapped && rt.isWaiting(a) {
			// It began waiting after this recompute read the waiting
			// apps: the recompute its waitOn asked for decides its wait
			// and gate.
			e.wait, e.gated = a.depsWait.Load(), a.gated
		}
		ready := len(a.eps.Load().ready) > 0
		if e.held > 0 && a.cs == nil && a.held == 0 && !ready {
			// Woken for its dependents: a cold start of its own, recorded
			// as any (status.lastColdStart), from the time it was told.
			rt.beginColdStart(a, now)
			a.cs.forDeps = true
		}
		if cs := a.cs; cs != nil && cs.forDeps && a.held == 0 {
			switch {
			case ready:
				cs.m.mark(markReady, now)
				records = append(records, a.finishLocked(cs, cs.m[markReady]))
			case e.held == 0:
				a.endColdStart() // nobody waits on it any more
			}
		}
		if a.depHeld != e.held || a.gated != e.gated {
			if a.gated && !e.gated && a.cs != nil && a.cs.gate.IsZero() {
				a.cs.gate = now
			}
			a.depHeld, a.gated = e.held, e.gated
			rt.opts.Pusher.Set(a.push, a.pushCountLocked())
		}
		if a.depHeld > 0 && !a.probing {
			a.probing = true // its sidecars, as if it held requests itself
			go rt.probeLoop(a)
		}
		if e.root && !e.wait && a.cs != nil {
			a.cs.m.mark(markDeps, now)
		}
		was := a.depsWait.Swap(e.wait)
		a.mu.Unlock()
		if was && !e.wait {
			release = append(release, a)
		}
	}
	for a, e := range effects {
		apply(a, *e)
	}
	for a := range d.touched {
		if effects[a] == nil {
			apply(a, depEffect{})
		}
	}
	d.touched = make(map[*app]struct{}, len(effects))
	for a := range effects {
		d.touched[a] = struct{}{}
	}
	for _, a := range release {
		a.broadcast()
		rt.releaseParked(a)
	}
	for _, rec := range records {
		rt.report(rec)
	}
}

// pushCountLocked is the held count told to the scalers for a: its own
// held requests (unless Ordered keeps them back) and the dependents
// waiting on it. Callers hold a.mu.
func (a *app) pushCountLocked() int64 {
	if a.gated {
		return a.depHeld
	}
	return a.held + a.depHeld
}

// depBlocker names the app of a's closure that keeps a's held requests
// waiting, for the answer at the cold-start timeout; "" if none.
func (rt *Router) depBlocker(a *app) string {
	if a.cfg.Load().Wakes == nil {
		return ""
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	g := rt.closureLocked(a)
	return g.notUp()
}

// timedOutMsg is the 504 answer to a request to a that waited 'waited':
// it names the dependency not up, if one is not, or the concurrency
// limit its ready pods were at.
func (rt *Router) timedOutMsg(a *app, waited, timeout time.Duration) string {
	dep := rt.depBlocker(a)
	ready, limit := len(a.eps.Load().ready), a.cfg.Load().Concurrency
	switch {
	case dep == "" && ready > 0 && limit > 0:
		return fmt.Sprintf("ebb-activator: app %s's %d ready pod(s) were at their concurrency limit (%d each) for %s (cold-start timeout %s)\n",
			a.key, ready, limit, waited.Round(time.Millisecond), timeout)
	case dep == "":
		return fmt.Sprintf("ebb-activator: app %s had no ready pod after %s (cold-start timeout %s)\n", a.key, waited.Round(time.Millisecond), timeout)
	case ready > 0:
		return fmt.Sprintf("ebb-activator: app %s waited %s for its dependency %s (cold-start timeout %s)\n", a.key, waited.Round(time.Millisecond), dep, timeout)
	}
	return fmt.Sprintf("ebb-activator: app %s had no ready pod after %s, nor its dependency %s (cold-start timeout %s)\n", a.key, waited.Round(time.Millisecond), dep, timeout)
}
