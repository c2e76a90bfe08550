package scaler

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
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
)

// withoutABreak marks the message of requests in flight for a while: the
// first message with it is written at once (it names the open connection),
// later ones only as messages are refreshed.
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
		return Idleness{Idle: false, Reason: ReasonSidecarBypassed, Message: fmt.Sprintf("%d running pod(s) of app %s have no sidecar: ebb cannot see their requests, so it keeps the app active. Label the namespace for injection and restart the Deployment (kubectl rollout restart).", f.bypassedPods, p.app.Name)}
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
const askedFresh = 2 * time.Minute

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
// replica about (see asked) true to the figures: it watches the AppRoutes
// and, every second, applies the condition of each whose status or reason
// changed, whose message now names a long-lived request or no longer does,
// or whose message changed otherwise and was last written more than
// messageRefresh ago (so counts in messages do not make a write a second).
// It writes only what the AppRoute does not say already.
type idleStatus struct {
	s   *Scaler
	dyn dynamic.Interface
	gvr schema.GroupVersionResource
	grp string
	log logr.Logger

	wrote map[appKey]time.Time
}

const (
	idlePeriod     = time.Second
	messageRefresh = time.Minute
	// IdleFieldManager owns the Idle condition.
	IdleFieldManager = "ebb-scaler"
)

func newIdleStatus(s *Scaler, dyn dynamic.Interface, names groupsuffix.Names, log logr.Logger) *idleStatus {
	return &idleStatus{s: s, dyn: dyn, gvr: routingv1alpha1.GroupVersionResource(names.Group()), grp: names.Group(), log: log, wrote: map[appKey]time.Time{}}
}

func (w *idleStatus) run(ctx context.Context) {
	inf := dynamicinformer.NewDynamicSharedInformerFactory(w.dyn, 10*time.Minute).ForResource(w.gvr).Informer()
	go inf.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return
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
		now := time.Now()
		for _, obj := range inf.GetStore().List() {
			u, ok := obj.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			w.sync(ctx, u, now)
		}
	}
}

func (w *idleStatus) sync(ctx context.Context, u *unstructured.Unstructured, now time.Time) {
	k := appKey{Namespace: u.GetNamespace(), Name: u.GetName()}
	p, fresh := w.s.asked.get(k, now)
	if !fresh {
		return // KEDA asks another replica, or nobody: its rate window is not known here
	}
	var f figures
	if a := w.s.reg.lookup(k); a != nil {
		f = a.figures(now, p.window)
	}
	want := idleOf(p, f)
	var st struct {
		Conditions []metav1.Condition `json:"conditions"`
	}
	if raw, ok, _ := unstructured.NestedMap(u.Object, "status"); ok {
		_ = runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &st)
	}
	cond := metav1.Condition{Type: routingv1alpha1.ConditionIdle, Status: metav1.ConditionFalse, Reason: want.Reason, Message: want.Message, ObservedGeneration: u.GetGeneration(), LastTransitionTime: metav1.NewTime(now)}
	if want.Idle {
		cond.Status = metav1.ConditionTrue
	}
	old := meta.FindStatusCondition(st.Conditions, cond.Type)
	if old != nil && old.Status == cond.Status {
		cond.LastTransitionTime = old.LastTransitionTime
		sameKind := strings.Contains(old.Message, withoutABreak) == strings.Contains(cond.Message, withoutABreak)
		if old.Reason == cond.Reason && (old.Message == cond.Message || sameKind && now.Sub(w.wrote[k]) < messageRefresh) {
			return
		}
	}
	if err := w.apply(ctx, k, cond); err != nil {
		w.log.Info("cannot set the Idle condition", "app", k.Namespace+"/"+k.Name, "error", err.Error())
		return
	}
	w.log.Info("Idle condition", "app", k.Namespace+"/"+k.Name, "idle", cond.Status, "reason", cond.Reason, "took", time.Since(now).String())
	w.wrote[k] = now
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
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = w.dyn.Resource(w.gvr).Namespace(k.Namespace).Patch(ctx, k.Name, types.ApplyPatchType, body,
		metav1.PatchOptions{FieldManager: IdleFieldManager, Force: ptr.To(true)}, "status")
	if err != nil {
		return fmt.Errorf("apply the Idle condition: %w", err)
	}
	return nil
}
