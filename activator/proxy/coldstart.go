package proxy

import (
	"cmp"
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/ebb-dev/ebb/internal/routing"
)

// The marks of a cold start, in the order they happen: each phase runs
// from one mark to the next and is named by the mark that ends it.
const (
	markHeld      = iota // the first request held while no pod was ready
	markTold             // the held count sent to a scaler
	markScaled           // the Deployment's replicas went above 0 (KEDA's /scale)
	markCreated          // a new pod of the app was created
	markScheduled        // it was bound to a node
	markStarted          // its containers were started
	markReady            // its sidecar answered ready (or its endpoint turned ready)
	markDeps             // every app of its wakes' closure had a ready endpoint (deps.go)
	markFirstByte        // the first response byte forwarded to a held request
	nMarks
)

// The marks a ColdStartWatcher reports.
const (
	MarkScaled    = markScaled
	MarkCreated   = markCreated
	MarkScheduled = markScheduled
	MarkStarted   = markStarted
)

// PhaseNames name the phases of a cold start, the phase ending at mark i
// being PhaseNames[i-1]. They are the values of the phase label of
// ebb_activator_cold_start_phase_seconds and the names in an AppRoute's
// status.lastColdStart.
//
// Dependencies is the wait on the app's dependencies (its AppRoute's
// spec.wakes, transitively) beyond its own readiness, plus, for
// wakeOrder Ordered, the wait before the app itself was told to a
// scaler (taken from ScalerTold); 0 for an app without wakes.
var PhaseNames = [nMarks - 1]string{"ScalerTold", "Scaled", "PodCreated", "PodScheduled", "ContainersStarted", "SidecarReady", "Dependencies", "FirstByte"}

// marks are the moments a cold start was seen to reach each mark; zero
// when not (yet) seen.
type marks [nMarks]time.Time

// coldStart is a cold start under way. Guarded by its app's mu.
type coldStart struct {
	m marks
	// forDeps: begun because dependents' requests wait on the app, none
	// of its own held (deps.go); it ends when the app is ready, its
	// FirstByte phase 0.
	forDeps bool
	// gate is when Ordered let the app's own hold be told to the scalers,
	// its dependencies up; zero when it never waited for that.
	gate   time.Time
	cancel context.CancelFunc // stops watching the Deployment and its pods
}

// mark records t for mark i unless a time is there already.
func (m *marks) mark(i int, t time.Time) {
	if m[i].IsZero() {
		m[i] = t
	}
}

// resolve returns m made whole and ordered: a mark not seen takes the time
// of the next one seen (its phase lasts 0), and no mark comes before the
// one before it or after the one after it. m[markHeld] and m[markFirstByte]
// must be set.
func (m marks) resolve() marks {
	if m[markDeps].IsZero() || m[markDeps].Before(m[markReady]) {
		// Not seen (an app without wakes), or its dependencies were up
		// before it: nothing was waited for beyond the app's readiness.
		m[markDeps] = m[markReady]
	}
	for i := nMarks - 2; i > markHeld; i-- {
		if m[i].IsZero() || m[i].After(m[i+1]) {
			m[i] = m[i+1]
		}
	}
	for i := markHeld + 1; i < nMarks; i++ {
		if m[i].Before(m[i-1]) {
			m[i] = m[i-1]
		}
	}
	return m
}

// phases returns the phase durations of resolved marks m as seen by a
// request held from 'from': phases before it last 0.
func (m marks) phases(from time.Time) [nMarks - 1]time.Duration {
	var out [nMarks - 1]time.Duration
	for i := range out {
		start, end := m[i], m[i+1]
		if start.Before(from) {
			start = from
		}
		if end.After(start) {
			out[i] = end.Sub(start)
		}
	}
	return out
}

// ColdStartRecord is a finished cold start, as the Router reports it.
type ColdStartRecord struct {
	Namespace, App string
	Began          time.Time
	Phases         [nMarks - 1]time.Duration
}

// Total is the sum of the phases: from the first request held to the
// first response byte forwarded.
func (c ColdStartRecord) Total() time.Duration {
	var t time.Duration
	for _, p := range c.Phases {
		t += p
	}
	return t
}

// ColdStartWatcher reports what the API server shows of a cold start:
// the app's Deployment scaled up, a new pod created, scheduled, started.
// Watch returns at once and reports through mark until ctx ends.
type ColdStartWatcher interface {
	Watch(ctx context.Context, namespace, app, deployment string, since time.Time, mark func(i int, t time.Time))
}

// beginColdStart starts tracking a cold start of a at now. Callers hold a.mu.
func (rt *Router) beginColdStart(a *app, now time.Time) {
	a.endColdStart() // one that became ready but never forwarded a byte
	cs := &coldStart{}
	cs.m.mark(markHeld, now)
	a.cs = cs
	if rt.opts.Watcher == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), cmp.Or(a.cfg.Load().ColdStartTimeout, rt.opts.ColdStartTimeout)+time.Minute)
	cs.cancel = cancel
	rt.opts.Watcher.Watch(ctx, a.key.Namespace, a.key.Name, a.cfg.Load().Deployment, now, func(i int, t time.Time) {
		a.mu.Lock()
		if a.cs == cs {
			cs.m.mark(i, t)
		}
		a.mu.Unlock()
	})
}

// endColdStart stops tracking a's cold start. Callers hold a.mu.
func (a *app) endColdStart() {
	if a.cs != nil && a.cs.cancel != nil {
		a.cs.cancel()
	}
	a.cs = nil
}

// ScalerTold notes that a scaler was sent app's held count (holdpush's
// Sent callback).
func (rt *Router) ScalerTold(namespace, name string, held int64, t time.Time) {
	if held <= 0 {
		return
	}
	rt.mu.Lock()
	a := rt.apps[routing.Key{Namespace: namespace, Name: name}]
	rt.mu.Unlock()
	if a == nil {
		return
	}
	a.mu.Lock()
	if a.cs != nil {
		a.cs.m.mark(markTold, t)
	}
	a.mu.Unlock()
}

// heldMarks returns the marks a request held since 'from' is released
// under: those of the cold start under way, or of the last one when it
// ended after the request was held.
func (a *app) heldMarks(from time.Time) (marks, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.cs != nil:
		return a.cs.m, true
	case !a.lastMarks[markHeld].IsZero() && !a.lastMarks[markFirstByte].Before(from):
		m := a.lastMarks
		m[markFirstByte] = time.Time{}
		return m, true
	}
	return marks{}, false
}

// firstByte notes the first response byte forwarded at t to a request held
// since from: the first one ends the cold start, which is recorded.
func (rt *Router) firstByte(a *app, t time.Time) {
	a.mu.Lock()
	cs := a.cs
	if cs == nil || cs.m[markReady].IsZero() {
		a.mu.Unlock()
		rt.opts.Log.V(1).Info("first byte forwarded outside a cold start", "app", a.key.String(), "coldStart", cs != nil)
		return
	}
	rec := a.finishLocked(cs, t)
	a.mu.Unlock()
	rt.report(rec)
}

// finishLocked ends a's cold start cs with its first byte at t and returns
// its record. Callers hold a.mu.
func (a *app) finishLocked(cs *coldStart, t time.Time) ColdStartRecord {
	cs.m[markFirstByte] = t
	m, gate := cs.m.resolve(), cs.gate
	a.lastMarks = m
	a.endColdStart()
	rec := ColdStartRecord{Namespace: a.key.Namespace, App: a.key.Name, Began: m[markHeld], Phases: m.phases(m[markHeld])}
	if !gate.IsZero() {
		// Ordered: the hold before the app itself was told waited on its
		// dependencies, not on the scaler.
		told := &rec.Phases[markTold-1]
		d := min(max(gate.Sub(m[markHeld]), 0), *told)
		*told -= d
		rec.Phases[markDeps-1] += d
	}
	return rec
}

// report observes a finished cold start and hands it to OnColdStart.
func (rt *Router) report(rec ColdStartRecord) {
	rt.opts.Metrics.observePhases(&rec.Phases)
	if rt.opts.OnColdStart != nil {
		rt.opts.OnColdStart(rec)
	}
}

// traceHeld adds to span, the span of a request held from 'from' whose
// first response byte went out at firstByte, a child span per phase of
// the cold start it waited on, clipped to its own wait.
func (rt *Router) traceHeld(span trace.Span, m marks, ok bool, from, firstByte time.Time) {
	if !span.IsRecording() || !ok || firstByte.IsZero() {
		return
	}
	m[markFirstByte] = firstByte
	m = m.resolve()
	ctx := trace.ContextWithSpan(context.Background(), span)
	for i, name := range PhaseNames {
		// A phase that ended before the request was held is kept, 0 long
		// at its start, so every trace names every phase.
		start, end := later(m[i], from), later(m[i+1], from)
		_, s := rt.opts.Tracer.Start(ctx, name, trace.WithTimestamp(start), trace.WithAttributes(attribute.Int("ebb.phase.index", i)))
		s.End(trace.WithTimestamp(end))
	}
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.Before(b) {
		return b
	}
	return a
}
