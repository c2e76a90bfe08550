package scaler

import (
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	"github.com/ebb-dev/ebb/internal/groupsuffix"
)

// TestIdleRetryBacksOff: an app whose Idle write failed waits out the
// queue's back-off; the 1 s tick does not queue it again meanwhile (a
// write failing for good was retried every second, a log line each).
func TestIdleRetryBacksOff(t *testing.T) {
	names := groupsuffix.MustNew(groupsuffix.Default)
	app := appKey{Namespace: "shop", Name: "hello"}
	rts := newRoutes(dynamicfake.NewSimpleDynamicClient(runtime.NewScheme()), names)
	if err := rts.inf.GetIndexer().Add(&route{ObjectMeta: metav1.ObjectMeta{Namespace: app.Namespace, Name: app.Name}}); err != nil {
		t.Fatal(err)
	}
	s := &Scaler{reg: newRegistry()}
	s.asked.set(params{app: app, window: DefaultRateWindow})
	w := newIdleStatus(s, nil, rts, names, logr.Discard())
	defer w.queue.ShutDown()

	w.enqueueDue(time.Now())
	if w.queue.Len() != 1 {
		t.Fatalf("queued %d, want the app whose Idle condition is due", w.queue.Len())
	}
	k, _ := w.queue.Get()
	w.queue.AddRateLimited(k) // its write failed
	w.queue.Done(k)
	for range 3 {
		w.enqueueDue(time.Now())
	}
	if n := w.queue.Len(); n != 0 {
		t.Errorf("%d queued at once after a failed write; want the app left to its back-off", n)
	}
	w.queue.Forget(k) // written at last
	w.enqueueDue(time.Now())
	if w.queue.Len() != 1 {
		t.Errorf("queued %d once its back-off was forgotten, want 1", w.queue.Len())
	}
}

// TestAskedForgotten: what KEDA asked about an app is forgotten
// askedForget after it last asked (its ScaledObject gone): a fleet's
// deleted apps are not iterated every tick for good.
func TestAskedForgotten(t *testing.T) {
	var a asked
	now := time.Now()
	old, recent := appKey{Namespace: "shop", Name: "gone"}, appKey{Namespace: "shop", Name: "stale"}
	a.set(params{app: old})
	a.set(params{app: recent})
	a.m[old] = askedParams{a.m[old].p, now.Add(-askedForget)}
	a.m[recent] = askedParams{a.m[recent].p, now.Add(-askedFresh)}
	if got := a.fresh(now); len(got) != 0 {
		t.Errorf("fresh = %v, want none", got)
	}
	if _, ok := a.m[old]; ok {
		t.Error("an app asked about askedForget ago is still remembered")
	}
	if _, ok := a.m[recent]; !ok {
		t.Error("an app asked about askedFresh ago is forgotten; /apps tells it under what it was asked with until askedForget")
	}
}

// TestBusyReasonSettles: a busy app's Idle reason swinging between
// RequestsInFlight and RecentRequests (steady traffic: a request in flight
// at one tick, none at the next) is written only once the other reason has
// lasted reasonSettle; any other change is written at once. The fleet
// bench's 20 warm apps cost 93 writes in 10 minutes before.
func TestBusyReasonSettles(t *testing.T) {
	names := groupsuffix.MustNew(groupsuffix.Default)
	app := appKey{Namespace: "shop", Name: "hello"}
	w := newIdleStatus(&Scaler{reg: newRegistry()}, nil, newRoutes(dynamicfake.NewSimpleDynamicClient(runtime.NewScheme()), names), names, logr.Discard())
	defer w.queue.ShutDown()
	inFlight := condKind{status: metav1.ConditionFalse, reason: ReasonRequestsInFlight}
	recent := condKind{status: metav1.ConditionFalse, reason: ReasonRecentRequests}
	long := condKind{status: metav1.ConditionFalse, reason: ReasonRequestsInFlight, withoutABreak: true}
	idle := condKind{status: metav1.ConditionTrue, reason: ReasonNoRequests}
	needed := condKind{status: metav1.ConditionFalse, reason: ReasonNeededByDependents}
	t0 := time.Now()
	steps := []struct {
		old, k condKind
		at     time.Duration
		want   bool
	}{
		{recent, inFlight, 0, false},
		{recent, inFlight, 10 * time.Second, false},
		{recent, recent, 0, false}, // back: nothing to write (due does not ask)
		{recent, inFlight, 12 * time.Second, false},
		{recent, inFlight, 12*time.Second + reasonSettle - time.Millisecond, false},
		{recent, inFlight, 12*time.Second + reasonSettle, true},
		{inFlight, long, 0, true}, // a long-lived request: at once
		{idle, inFlight, 0, true}, // idle → busy: at once
		{inFlight, idle, 0, true}, // busy → idle: at once
		// A dependency under activationConcurrency: its dependents' calls
		// in flight at one tick, none at the next.
		{needed, inFlight, 100 * time.Second, false},
		{needed, inFlight, 100*time.Second + reasonSettle, true},
		{idle, needed, 0, true}, // idle → needed: at once
		{needed, idle, 0, true}, // needed → idle (its last dependent gone): at once
	}
	for i, s := range steps {
		if s.old == s.k {
			w.mu.Lock()
			delete(w.settling, app) // what due does when the route already says k
			w.mu.Unlock()
			continue
		}
		if got := w.settled(app, s.old, s.k, t0.Add(s.at)); got != s.want {
			t.Errorf("step %d: %s → %s at +%s: settled %v, want %v", i, s.old.reason, s.k.reason, s.at, got, s.want)
		}
	}
}
