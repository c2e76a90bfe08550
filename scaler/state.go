package scaler

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/ebb-dev/ebb/internal/holdpush"
	"github.com/ebb-dev/ebb/internal/sidecarapi"
)

// appKey identifies an app: the namespace of its pods and the value of their
// <suffix>/app label, which is the AppRoute's name. The scaler needs nothing
// else from the AppRoute, so it does not depend on its Go types.
type appKey = holdpush.App

// registry is the scaler's whole state: the apps and the pods it reads.
// Lock order: holdpush.Server's lock, then registry.mu, then app.mu.
type registry struct {
	mu      sync.RWMutex
	apps    map[appKey]*app
	pods    map[string]*pod // by namespace/name
	targets []*pod          // readable pods, rebuilt when dirty
	dirty   bool
	retired []*pod // removed pods whose connection the tick closes
}

func newRegistry() *registry {
	return &registry{apps: map[appKey]*app{}, pods: map[string]*pod{}}
}

// app holds one app's figures. The tick goroutine writes the sidecar part,
// the holdpush callback writes held; both under mu.
type app struct {
	key appKey

	// guarded by registry.mu (write lock)
	refs int // pods that name this app
	live int // of them, pods that are not terminating, Pending or Running: the app is up or coming up (see Scaler.keptUp)

	mu           sync.Mutex
	inFlight     int64         // Σ sidecar in-flight at the last tick
	busyFor      time.Duration // the longest a pod has had requests in flight without a break
	held         int64         // Σ held by activators, live
	pods         int           // pods with a sidecar, Running with an IP
	readyPods    int
	stalePods    int // not answering, last value kept
	droppedPods  int // not answering for longer, not counted
	refusedPods  int // answering implausible figures, not counted
	bypassedPods int // Running pods without a sidecar
	counted      uint64
	coldStarts   uint64 // times held went above 0 while no pod was ready
	hist         history
	lastBusy     time.Time
	released     int64 // unix nanos of when held last went down: those requests are recent (see figures.released)
	watchers     int
	changed      chan struct{}
}

func newApp(k appKey, now time.Time) *app {
	return &app{key: k, changed: make(chan struct{}), lastBusy: now}
}

// notifyLocked wakes every StreamIsActive watching the app.
func (a *app) notifyLocked() {
	close(a.changed)
	a.changed = make(chan struct{})
}

// pod is one app pod. Fields set at creation never change (a pod whose app
// or address changes gets a new pod); flags are rewritten by the informer
// under registry.mu; the read state belongs to the tick.
type pod struct {
	key  string
	uid  types.UID
	app  *app
	url  string     // "" when not readable (no sidecar, not Running, no IP)
	conn *statsConn // kept-alive connection to url, owned by the tick or, while bg.busy, by the slow lane's read
	seen time.Time  // when the scaler first saw the pod readable

	// bg is the slow lane's read of the pod (see readAll): busy while it
	// runs, res when it ended.
	bg struct {
		busy atomic.Bool
		res  atomic.Pointer[readResult]
	}

	// guarded by registry.mu
	sidecar   bool
	running   bool
	ready     bool
	live      bool // podInfo.live
	fromZero  bool // every request the sidecar counted is new to the scaler
	removed   atomic.Bool
	readState readState
}

// readState is owned by the tick: workers write res, the aggregation reads
// res and writes the rest (while holding registry.mu for reading).
type readState struct {
	res     readResult
	last    sidecarapi.Snapshot
	lastAt  int64 // unix nanos of last
	have    bool
	missed  int
	dropped bool

	slow    bool  // read off the tick (readAll)
	strikes uint8 // times the pod went slow
	good    int   // fast reads in a row while slow

	bootChanges int   // boot-ID changes since bootSince
	bootSince   int64 // unix nanos
	refused     string
}

type readResult struct {
	ok      bool
	snap    sidecarapi.Snapshot
	err     error
	at      time.Time // when the read ended
	slow    bool      // timed out or took more than half of ReadTimeout
	pending bool      // a slow-lane read not ended (or not started) since the last tick
	refused string    // the answer itself was refused: a sidecarapi.ResponseError reason or refusedFormat
}

// podInfo is what the scaler takes from a Pod object.
type podInfo struct {
	key      string
	uid      types.UID
	app      appKey
	sidecar  bool
	running  bool
	ready    bool
	live     bool   // not terminating, Pending or Running
	url      string // set when sidecar && running && IP known
	hostport string
}

// upsert records a pod. initial says the pod was in the informer's initial
// list: only a pod that was already readable then may have counted requests
// the scaler must not attribute to now.
// It reports whether the pod is newly seen running without a sidecar.
func (r *registry) upsert(in podInfo, initial bool, now time.Time) (newlyBypassed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.pods[in.key]
	newlyBypassed = in.running && !in.sidecar && (old == nil || !old.running || old.sidecar)
	if old != nil && old.app.key == in.app && old.url == in.url {
		old.app.live += b2i(in.live) - b2i(old.live)
		old.sidecar, old.running, old.ready, old.live = in.sidecar, in.running, in.ready, in.live
		return newlyBypassed
	}
	p := &pod{key: in.key, uid: in.uid, url: in.url, seen: now, sidecar: in.sidecar, running: in.running, ready: in.ready, live: in.live}
	if in.url != "" {
		p.conn = newStatsConn(in.hostport, sidecarapi.StatsPath)
	}
	switch {
	case old != nil:
		// Readable for the first time (an IP arrived) or moved to another
		// app: requests counted before were not seen by this scaler.
		p.fromZero = old.fromZero || old.url == ""
		r.removeLocked(old)
	default:
		p.fromZero = !initial || in.url == ""
	}
	a := r.apps[in.app]
	if a == nil {
		a = newApp(in.app, now)
		r.apps[in.app] = a
	}
	a.refs++
	a.live += b2i(in.live)
	p.app = a
	r.pods[in.key] = p
	r.dirty = true
	return newlyBypassed
}

func (r *registry) remove(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p := r.pods[key]; p != nil {
		r.removeLocked(p)
	}
}

func (r *registry) removeLocked(p *pod) {
	p.removed.Store(true)
	if p.conn != nil {
		r.retired = append(r.retired, p)
	}
	p.app.refs--
	p.app.live -= b2i(p.live)
	delete(r.pods, p.key)
	r.dirty = true
}

// retireAgain keeps p for the next takeRetired (a slow-lane read still
// uses its connection).
func (r *registry) retireAgain(p *pod) {
	r.mu.Lock()
	r.retired = append(r.retired, p)
	r.mu.Unlock()
}

// takeRetired returns the pods removed since the last call.
func (r *registry) takeRetired() []*pod {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.retired
	r.retired = nil
	return out
}

// closeAll closes every connection (the scaler is stopping).
func (r *registry) closeAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.pods {
		if p.conn != nil {
			p.conn.close()
		}
	}
	for _, p := range r.retired {
		p.conn.close()
	}
	r.retired = nil
}

// readable returns the pods to read this tick.
func (r *registry) readable() []*pod {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.dirty {
		// A new slice each time: the previous one may still be read.
		t := make([]*pod, 0, len(r.pods))
		for _, p := range r.pods {
			if p.url != "" {
				t = append(t, p)
			}
		}
		sort.Slice(t, func(i, j int) bool { return t[i].key < t[j].key })
		r.targets, r.dirty = t, false
	}
	return r.targets
}

// livePods returns how many of k's pods are live (podInfo.live).
func (r *registry) livePods(k appKey) int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if a := r.apps[k]; a != nil {
		return a.live
	}
	return 0
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// lookup returns the app or nil.
func (r *registry) lookup(k appKey) *app {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.apps[k]
}

// withApp runs f on the app, creating it if needed; the app cannot be
// garbage collected while f runs.
func (r *registry) withApp(k appKey, now time.Time, f func(*app)) {
	r.mu.RLock()
	if a := r.apps[k]; a != nil {
		f(a)
		r.mu.RUnlock()
		return
	}
	r.mu.RUnlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	a := r.apps[k]
	if a == nil {
		a = newApp(k, now)
		r.apps[k] = a
	}
	f(a)
}

// present tells whether an app has a pod (with a sidecar or without) or
// held requests.
func (r *registry) present(k appKey) bool {
	a := r.lookup(k)
	if a == nil {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.pods > 0 || a.held > 0 || a.bypassedPods > 0
}

// setHeld is the holdpush callback: it must not block.
func (r *registry) setHeld(k appKey, held int64, now time.Time) {
	r.withApp(k, now, func(a *app) {
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.held == held {
			return
		}
		if a.held == 0 && a.readyPods == 0 {
			a.coldStarts++ // counted here once, however many activators hold
		}
		if held < a.held {
			a.released = now.UnixNano()
		}
		a.held = held
		a.lastBusy = now
		a.notifyLocked()
	})
}

// watch registers a StreamIsActive on an app (creating it) and returns it;
// call unwatch when the stream ends.
func (r *registry) watch(k appKey, now time.Time) *app {
	var out *app
	r.withApp(k, now, func(a *app) {
		a.mu.Lock()
		a.watchers++
		a.mu.Unlock()
		out = a
	})
	return out
}

func (r *registry) unwatch(a *app) {
	a.mu.Lock()
	a.watchers--
	a.mu.Unlock()
}

// gc forgets apps with no pod, nothing held, no watcher and nothing counted
// for keep.
func (r *registry) gc(now time.Time, keep time.Duration) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for k, a := range r.apps {
		if a.refs > 0 {
			continue
		}
		a.mu.Lock()
		idle := a.held == 0 && a.watchers == 0 && now.Sub(a.lastBusy) > keep
		a.mu.Unlock()
		if idle {
			delete(r.apps, k)
			n++
		}
	}
	return n
}

// history keeps an app's cumulative counted requests at the ticks where it
// grew, back to the longest window anyone may ask for: at most
// --max-rate-window / --tick entries of 16 bytes for an app busy at every
// tick, none for an idle one.
type history struct {
	base uint64  // cumulative count before the oldest entry
	at   []int64 // unix nanos
	cum  []uint64
}

func (h *history) add(t time.Time, cum uint64) {
	h.at = append(h.at, t.UnixNano())
	h.cum = append(h.cum, cum)
}

func (h *history) prune(before time.Time) {
	b := before.UnixNano()
	i := 0
	for i < len(h.at) && h.at[i] < b {
		h.base = h.cum[i]
		i++
	}
	if i == 0 {
		return
	}
	h.at = append(h.at[:0], h.at[i:]...)
	h.cum = append(h.cum[:0], h.cum[i:]...)
}

// since returns how many requests were counted after t, given the current
// cumulative count.
func (h *history) since(t time.Time, now uint64) uint64 {
	tn := t.UnixNano()
	i := sort.Search(len(h.at), func(i int) bool { return h.at[i] > tn }) // the first entry after t
	if i == 0 {
		return now - h.base
	}
	return now - h.cum[i-1]
}

// figures is a consistent copy of an app's numbers.
type figures struct {
	inFlight, held                                        int64
	busyFor                                               time.Duration
	coldStarts                                            uint64
	pods, readyPods, stalePods, droppedPods, bypassedPods int
	refusedPods                                           int
	counted                                               uint64
	inWindow                                              uint64 // counted within the window asked for
	// released: requests left the activators' hold within the window.
	// They count as recent, as the sidecars' counts would: the sidecar a
	// request goes to counts it at its next read, a tick or more after the
	// release (a slow lane's read a tick later still), and until then the
	// app would look idle — KEDA told inactive, Idle=True written, the
	// hand-off slice published again — for a second of every wake. A held
	// request that never reached a pod (a 504, a client gone, an activator
	// gone) is a request within the window all the same. Not in inWindow:
	// the sidecar counts it too, so the rate would count it twice.
	released bool

	// Set by Scaler.figuresOf, not by the app's own figures: the apps
	// that need this one and have a live pod (they keep it active), and
	// the ScaledObject that keeps it up through another trigger (the Idle
	// condition's reason only: ebb's own answer is not changed by it).
	kept    keep
	trigger *otherTrigger
}

func (a *app) figures(now time.Time, window time.Duration) figures {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.figuresLocked(now, window)
}

func (a *app) figuresLocked(now time.Time, window time.Duration) figures {
	return figures{
		inFlight: a.inFlight, busyFor: a.busyFor, held: a.held, coldStarts: a.coldStarts,
		pods: a.pods, readyPods: a.readyPods, stalePods: a.stalePods, droppedPods: a.droppedPods, bypassedPods: a.bypassedPods,
		refusedPods: a.refusedPods,
		counted:     a.counted,
		inWindow:    a.hist.since(now.Add(-window), a.counted),
		released:    a.released != 0 && now.UnixNano()-a.released < int64(window),
	}
}

func (f figures) concurrency() int64 { return f.inFlight + f.held }

// recent tells whether a request was counted or left the activators' hold
// within the window.
func (f figures) recent() bool { return f.inWindow > 0 || f.released }
