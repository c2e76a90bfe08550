package scaler

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/groupsuffix"
)

// The reasons of the Idle condition.
const (
	ReasonNoRequests       = "NoRequests"
	ReasonBelowActivation  = "BelowActivation"
	ReasonSidecarBypassed  = "SidecarBypassed"
	ReasonRequestsHeld     = "RequestsHeld"
	ReasonRequestsInFlight = "RequestsInFlight"
	ReasonRecentRequests   = "RecentRequests"
	// ReasonNeededByDependents: an app whose AppRoute's spec.wakes names
	// this one has a live pod, so this one stays active (Idle False).
	ReasonNeededByDependents = "NeededByDependents"
	// ReasonKeptUpByAnotherTrigger: ebb sees no requests (Idle True), but
	// KEDA holds the app's ScaledObject active through another of its
	// triggers (cron for warm hours), so the app stays up all the same.
	ReasonKeptUpByAnotherTrigger = "KeptUpByAnotherTrigger"
)

// withoutABreak marks the message of requests in flight for a while: the
// first message with it is written at once (it names the open connection),
// later ones not (their counts churn).
const withoutABreak = "without a break"

// Idleness is what keeps an app active, or that nothing does: the
// activation rule of params.active, explained (the Idle condition, and
// "idle" in GET /apps).
type Idleness struct {
	Idle    bool   `json:"idle"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

func idleOf(p params, f figures) Idleness {
	active := float64(f.concurrency()) > p.activation
	switch {
	case f.bypassedPods > 0:
		return Idleness{Idle: false, Reason: ReasonSidecarBypassed, Message: fmt.Sprintf("%d running pod(s) of app %s have no sidecar: ebb cannot see their requests, so it keeps the app active. Label the namespace for injection and restart the app's pods (kubectl rollout restart, or delete them for a kind it does not know).", f.bypassedPods, p.app.Name)}
	case active && f.held > 0:
		return Idleness{Idle: false, Reason: ReasonRequestsHeld, Message: fmt.Sprintf("%d request(s) held by the activator: a cold start is under way.", f.held)}
	case active && f.inFlight > 0:
		msg := fmt.Sprintf("%d request(s) in flight", f.inFlight)
		if f.busyFor >= time.Second {
			msg += fmt.Sprintf(", %s for %s: a long-lived request or an open connection (WebSocket, stream) keeps the app active until it closes", withoutABreak, f.busyFor.Round(time.Second))
		}
		return Idleness{Idle: false, Reason: ReasonRequestsInFlight, Message: msg + "."}
	case p.activation == 0 && f.inWindow > 0:
		return Idleness{Idle: false, Reason: ReasonRecentRequests, Message: fmt.Sprintf("%d request(s) in the last %s (the rate window): the app is idle once %s pass without one.", f.inWindow, p.window, p.window)}
	case p.activation == 0 && f.released:
		return Idleness{Idle: false, Reason: ReasonRecentRequests, Message: fmt.Sprintf("requests left the activator's hold in the last %s (the rate window): the app is idle once %s pass without one.", p.window, p.window)}
	case f.kept.live > 0:
		return Idleness{Idle: false, Reason: ReasonNeededByDependents, Message: f.kept.message()}
	case f.trigger != nil:
		return Idleness{Idle: true, Reason: ReasonKeptUpByAnotherTrigger, Message: fmt.Sprintf("ebb sees no requests; the ScaledObject %s keeps the app up through another trigger (%s).", f.trigger.scaledObject, strings.Join(f.trigger.types, ", "))}
	case p.activation > 0 && f.concurrency() > 0:
		return Idleness{Idle: true, Reason: ReasonBelowActivation, Message: fmt.Sprintf("concurrency %d is not above activationConcurrency %v: KEDA may scale the app to zero.", f.concurrency(), p.activation)}
	default:
		return Idleness{Idle: true, Reason: ReasonNoRequests, Message: fmt.Sprintf("no request in flight or held, none in the last %s: KEDA may scale the app to zero.", p.window)}
	}
}

// asked remembers, per app, the last params a ScaledObject asked with
// (its rate window and activation threshold) and when. KEDA talks to one
// scaler replica at a time, so only that replica knows them: a replica
// writes an app's Idle condition only while KEDA asks it about the app,
// and two replicas never disagree over a window one of them does not know.
type asked struct {
	mu sync.Mutex
	m  map[appKey]askedParams
}

type askedParams struct {
	p  params
	at time.Time
}

// askedFresh is how long a replica keeps writing an app's Idle condition
// after KEDA last asked it about the app (KEDA asks every pollingInterval).
// askedForget is when it forgets what KEDA asked: the app's ScaledObject
// is gone, or KEDA asks another replica.
const (
	askedFresh  = 2 * time.Minute
	askedForget = 10 * askedFresh
)

// fresh returns the params of every app asked about within askedFresh of
// now. The others stay until askedForget: /apps and the metrics tell an
// app's idleness under what its ScaledObject last asked, then under the
// defaults; an app whose ScaledObject is gone costs nothing after that.
func (a *asked) fresh(now time.Time) []params {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]params, 0, len(a.m))
	for k, ap := range a.m {
		switch age := now.Sub(ap.at); {
		case age < askedFresh:
			out = append(out, ap.p)
		case age >= askedForget:
			delete(a.m, k)
		}
	}
	return out
}

func (a *asked) set(p params) {
	a.mu.Lock()
	if a.m == nil {
		a.m = map[appKey]askedParams{}
	}
	a.m[p.app] = askedParams{p, time.Now()}
	a.mu.Unlock()
}

// get returns what k was last asked with, and whether that was within
// askedFresh of now; an app no ScaledObject asked about has the defaults.
func (a *asked) get(k appKey, now time.Time) (params, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if ap, ok := a.m[k]; ok {
		return ap.p, now.Sub(ap.at) < askedFresh
	}
	return params{app: k, window: DefaultRateWindow}, false
}

// idleStatus keeps the Idle condition of the AppRoutes KEDA asks this
// replica about (see asked) true to the figures. Every second it compares,
// for each app asked about, the condition the figures give with the one
// in the AppRoute cache, and queues the app when its status or reason
// differs, or when its message starts or stops naming a long-lived request
// (withoutABreak). Counts in a message alone never make a write: the
// message tells the figures of the moment the reason last changed. A
// bounded queue (one entry per app at most) and a few workers write the
// conditions, at the client's --kube-api-qps, so a fleet that wakes at
// once drains in bounded time and KEDA's asks never wait on a write.
type idleStatus struct {
	s      *Scaler
	dyn    dynamic.Interface
	gvr    schema.GroupVersionResource
	routes *routes
	log    logr.Logger
	queue  workqueue.TypedRateLimitingInterface[appKey]

	mu       sync.Mutex
	wrote    map[appKey]wroteCond // applied by this replica, until the cache shows it
	settling map[appKey]wroteCond // a busy app's other reason, and since when
}

// wroteCond is what a replica applied, by kind, and when.
type wroteCond struct {
	kind condKind
	at   time.Time
}

// condKind is what of an Idle condition is worth a write.
type condKind struct {
	status        metav1.ConditionStatus
	reason        string
	withoutABreak bool
}

func kindOf(c *metav1.Condition) condKind {
	return condKind{c.Status, c.Reason, strings.Contains(c.Message, withoutABreak)}
}

const (
	idlePeriod = time.Second
	// idleWorkers write Idle conditions side by side (the client's rate
	// limit, not their number, bounds the writes per second).
	idleWorkers = 4
	// wroteTrust is how long a write this replica made stands for the
	// AppRoute while the cache does not show it yet.
	wroteTrust = 30 * time.Second
	// IdleFieldManager owns the Idle condition.
	IdleFieldManager = "ebb-scaler"
)

func newIdleStatus(s *Scaler, dyn dynamic.Interface, r *routes, names groupsuffix.Names, log logr.Logger) *idleStatus {
	return &idleStatus{s: s, dyn: dyn, gvr: routingv1alpha1.GroupVersionResource(names.Group()), routes: r, log: log, wrote: map[appKey]wroteCond{}, settling: map[appKey]wroteCond{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.NewTypedItemExponentialFailureRateLimiter[appKey](100*time.Millisecond, 30*time.Second),
			workqueue.TypedRateLimitingQueueConfig[appKey]{Name: "idle"})}
}

func (w *idleStatus) run(ctx context.Context) {
	defer w.queue.ShutDown()
	if !cache.WaitForCacheSync(ctx.Done(), w.routes.synced) {
		return
	}
	for range idleWorkers {
		go w.work(ctx)
	}
	t := time.NewTicker(idlePeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !w.s.ready.Load() {
			continue
		}
		w.enqueueDue(time.Now())
	}
}

// enqueueDue queues every app asked about whose Idle condition is due,
// but those whose last write failed: they wait in the queue's back-off
// (retried, at the latest, 30 s apart), not for the next tick.
func (w *idleStatus) enqueueDue(now time.Time) {
	w.forgetOld(now)
	for _, p := range w.s.asked.fresh(now) {
		if w.queue.NumRequeues(p.app) == 0 && w.due(p, now) != nil {
			w.queue.Add(p.app)
		}
	}
}

// due returns the Idle condition to apply to p's AppRoute, or nil when the
// AppRoute (or this replica's last write to it) says it already, or there
// is no AppRoute.
func (w *idleStatus) due(p params, now time.Time) *metav1.Condition {
	rt := w.routes.get(p.app)
	if rt == nil {
		return nil
	}
	want := idleOf(p, w.s.figuresOf(p, now))
	cond := &metav1.Condition{Type: routingv1alpha1.ConditionIdle, Status: metav1.ConditionFalse, Reason: want.Reason, Message: want.Message, ObservedGeneration: rt.Generation, LastTransitionTime: metav1.NewTime(now)}
	if want.Idle {
		cond.Status = metav1.ConditionTrue
	}
	k := kindOf(cond)
	if old := rt.idle; old != nil {
		if kindOf(old) == k {
			w.mu.Lock()
			delete(w.settling, p.app)
			w.mu.Unlock()
			return nil
		}
		if old.Status == cond.Status {
			cond.LastTransitionTime = old.LastTransitionTime
		}
		if !w.settled(p.app, kindOf(old), k, now) {
			return nil
		}
	}
	w.mu.Lock()
	wr, ok := w.wrote[p.app]
	w.mu.Unlock()
	if ok && wr.kind == k && now.Sub(wr.at) < wroteTrust {
		return nil // written; the watch has not brought it back yet
	}
	return cond
}

// reasonSettle is how long a busy app's other reason must last before it
// is written: an app under steady traffic has a request in flight at one
// tick and none at the next, and its Idle condition would swing between
// RequestsInFlight and RecentRequests, a write each (a fleet's warm apps
// wrote about once every two minutes each). NeededByDependents is busy
// alike: a dependency under activationConcurrency swings between it and
// RequestsInFlight as its dependents' calls come and go.
const reasonSettle = 30 * time.Second

// settled reports whether the change of app's Idle condition from old to
// k is to be written now: at once unless both say the app is busy
// (RequestsInFlight, RecentRequests) alike but for the reason, and then
// once k has lasted reasonSettle.
func (w *idleStatus) settled(app appKey, old, k condKind, now time.Time) bool {
	busy := func(c condKind) bool {
		return c.status == metav1.ConditionFalse && (c.reason == ReasonRequestsInFlight || c.reason == ReasonRecentRequests || c.reason == ReasonNeededByDependents)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !busy(old) || !busy(k) || old.withoutABreak != k.withoutABreak {
		delete(w.settling, app)
		return true
	}
	s, ok := w.settling[app]
	if !ok || s.kind != k {
		w.settling[app] = wroteCond{k, now}
		return false
	}
	return now.Sub(s.at) >= reasonSettle
}

func (w *idleStatus) forgetOld(now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, wr := range w.wrote {
		if now.Sub(wr.at) >= wroteTrust {
			delete(w.wrote, k)
		}
	}
	for k, s := range w.settling {
		if now.Sub(s.at) >= 10*reasonSettle {
			delete(w.settling, k) // the app is no longer asked about
		}
	}
}

func (w *idleStatus) work(ctx context.Context) {
	for {
		k, shutdown := w.queue.Get()
		if shutdown {
			return
		}
		w.write(ctx, k)
		w.queue.Done(k)
	}
}

// write applies k's Idle condition if it is still due; a failure is
// retried with a back-off of its own.
func (w *idleStatus) write(ctx context.Context, k appKey) {
	now := time.Now()
	p, fresh := w.s.asked.get(k, now)
	var cond *metav1.Condition
	if fresh {
		cond = w.due(p, now)
	}
	if cond == nil {
		w.queue.Forget(k)
		return
	}
	if err := w.apply(ctx, k, *cond); err != nil {
		if apierrors.IsNotFound(err) || ctx.Err() != nil {
			w.queue.Forget(k)
			return
		}
		w.log.Info("cannot set the Idle condition; retrying", "app", k.Namespace+"/"+k.Name, "retries", w.queue.NumRequeues(k), "error", err.Error())
		w.queue.AddRateLimited(k)
		return
	}
	w.queue.Forget(k)
	w.mu.Lock()
	w.wrote[k] = wroteCond{kindOf(cond), now}
	w.mu.Unlock()
	w.log.Info("Idle condition", "app", k.Namespace+"/"+k.Name, "idle", cond.Status, "reason", cond.Reason, "took", time.Since(now).String())
}

func (w *idleStatus) apply(ctx context.Context, k appKey, cond metav1.Condition) error {
	body, err := json.Marshal(map[string]any{
		"apiVersion": w.gvr.GroupVersion().String(),
		"kind":       routingv1alpha1.Kind,
		"metadata":   map[string]any{"name": k.Name, "namespace": k.Namespace},
		"status":     map[string]any{"conditions": []metav1.Condition{cond}},
	})
	if err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = w.dyn.Resource(w.gvr).Namespace(k.Namespace).Patch(ctx, k.Name, types.ApplyPatchType, body,
		metav1.PatchOptions{FieldManager: IdleFieldManager, Force: ptr.To(true)}, "status")
	if err != nil {
		return fmt.Errorf("apply the Idle condition: %w", err)
	}
	return nil
}
