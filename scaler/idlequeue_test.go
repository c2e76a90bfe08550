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
