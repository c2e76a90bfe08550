package scaler

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ebb-dev/ebb/internal/sidecarapi"
)

const maxStatsBody = sidecarapi.MaxBody

// readAll reads every pod, within ReadTimeout each, and leaves each pod's
// result in readState.res.
//
// Pods on the tick's lane are read ReadParallelism at a time and the tick
// waits for them. A pod whose read timed out or took more than half of
// ReadTimeout moves to the slow lane: its reads run in the background,
// ReadParallelism at most at once and one per pod, and the tick takes the
// result of the read started at an earlier tick without waiting (so its
// figure is up to a tick old). It returns to the tick's lane after
// 2^strikes fast reads in a row (strikes: the times it went slow, so a pod
// that alternates costs the tick exponentially less often, at most once in
// maxProbation ticks). A pod that answers slowly or never thus costs the
// tick one read, once, and the other apps nothing after.
func (s *Scaler) readAll(ctx context.Context, targets []*pod) {
	fast := make([]*pod, 0, len(targets))
	var slow []*pod
	for _, p := range targets {
		if p.readState.slow || p.bg.busy.Load() {
			slow = append(slow, p)
		} else {
			fast = append(fast, p)
		}
	}
	s.readSlow(ctx, slow)
	var next atomic.Int64
	workers := min(s.opts.ReadParallelism, len(fast))
	var wg sync.WaitGroup
	wg.Add(workers)
	for range workers {
		go func() {
			defer wg.Done()
			var buf [maxStatsBody]byte
			for {
				i := int(next.Add(1)) - 1
				if i >= len(fast) {
					return
				}
				p := fast[i]
				p.readState.res = s.readOne(ctx, p, buf[:])
			}
		}()
	}
	wg.Wait()
}

// errStillReading is the result of a slow-lane pod whose read has not
// ended since the last tick.
var errStillReading = errors.New("read still under way (slow lane)")

// readSlow takes the results of the slow lane's finished reads and starts
// the next ones; the pods least often slow are started first when
// ReadParallelism reads are under way already.
func (s *Scaler) readSlow(ctx context.Context, slow []*pod) {
	sort.SliceStable(slow, func(i, j int) bool { return slow[i].readState.strikes < slow[j].readState.strikes })
	for _, p := range slow {
		if p.bg.busy.Load() {
			p.readState.res = readResult{err: errStillReading, pending: true}
			continue
		}
		if r := p.bg.res.Swap(nil); r != nil {
			p.readState.res = *r
		} else {
			p.readState.res = readResult{err: errStillReading, pending: true}
		}
		st := &p.readState
		if r := st.res; !st.slow || r.ok && !r.slow && st.good+1 >= 1<<st.strikes {
			continue // back on the tick's lane from the next tick on (lane)
		}
		select {
		case s.slowSlots <- struct{}{}:
		default:
			continue // the lane is full: next tick
		}
		p.bg.busy.Store(true)
		s.slowReads.Add(1)
		go func() {
			defer s.slowReads.Done()
			var buf [maxStatsBody]byte
			r := s.readOne(ctx, p, buf[:])
			p.bg.res.Store(&r)
			p.bg.busy.Store(false) // after the last use of p.conn
			<-s.slowSlots
		}()
	}
}

func (s *Scaler) readOne(ctx context.Context, p *pod, buf []byte) readResult {
	start := time.Now()
	n, err := p.conn.get(ctx, s.dialer, s.opts.ReadTimeout, buf)
	r := readResult{at: time.Now()}
	r.slow = r.at.Sub(start) > s.opts.ReadTimeout/2
	if err != nil {
		r.err = err
		var re *sidecarapi.ResponseError
		var ne net.Error
		switch {
		case errors.As(err, &re):
			r.refused = re.Reason
		case errors.As(err, &ne) && ne.Timeout():
			r.slow = true
		}
		return r
	}
	snap, err := sidecarapi.ParseSnapshot(buf[:n])
	if err != nil {
		r.err, r.refused = err, refusedFormat
		return r
	}
	r.ok, r.snap = true, snap
	return r
}

// delta is how many requests a pod counted since the scaler last read it.
// A new boot ID means the sidecar restarted: everything it counted since is
// new, so a smaller total is a reset, never a negative delta.
func delta(st *readState, snap sidecarapi.Snapshot, fromZero bool) uint64 {
	switch {
	case !st.have && fromZero:
		return snap.Total
	case !st.have:
		return 0 // the pod was serving before the scaler started: a baseline
	case snap.BootID != st.last.BootID, snap.Total < st.last.Total:
		return snap.Total
	default:
		return snap.Total - st.last.Total
	}
}

type appAcc struct {
	inFlight                                       int64
	busyFor                                        time.Duration
	delta                                          uint64
	pods, ready, stale, dropped, bypassed, refused int
}

// tick reads every sidecar and publishes the per-app figures.
func (s *Scaler) tick(ctx context.Context) {
	start := time.Now()
	targets := s.reg.readable()
	s.readAll(ctx, targets)
	for _, p := range s.reg.takeRetired() {
		if p.bg.busy.Load() {
			s.reg.retireAgain(p) // a slow-lane read still uses it
			continue
		}
		p.conn.close() // after the reads: a worker may have been using it
	}
	s.aggregate(time.Now(), targets)
	s.metrics.tickSeconds.Observe(time.Since(start).Seconds())
	s.metrics.podsRead.Set(float64(len(targets)))
	if n := s.reg.gc(time.Now(), s.opts.MaxRateWindow); n > 0 {
		s.log.V(1).Info("forgot idle apps with no pod", "apps", n)
	}
}

func (s *Scaler) aggregate(now time.Time, targets []*pod) {
	r := s.reg
	r.mu.RLock()
	defer r.mu.RUnlock()
	if s.acc == nil {
		s.acc = map[*app]*appAcc{}
	}
	clear(s.acc)
	acc := func(a *app) *appAcc {
		x := s.acc[a]
		if x == nil {
			x = &appAcc{}
			s.acc[a] = x
		}
		return x
	}
	for _, p := range r.pods {
		x := acc(p.app)
		if p.running && !p.sidecar {
			x.bypassed++
		}
		if p.url != "" {
			x.pods++
			if p.ready {
				x.ready++
			}
		}
	}
	var failed, slow int
	for _, p := range targets {
		if p.removed.Load() {
			continue
		}
		st, x := &p.readState, acc(p.app)
		s.lane(p)
		if st.slow {
			slow++
		}
		if st.res.ok {
			res := st.res
			reason, msg := plausible(st, res.snap, res.at, p.seen, p.fromZero)
			if reason != "" {
				// Left out, not even its last value kept; the next
				// reading is checked against this one's counters, and
				// should the pod stop answering, nothing of it is kept as
				// stale (its figures are not trusted).
				x.refused++
				last := res.snap
				last.InFlight, last.BusyFor = 0, 0
				st.last, st.lastAt, st.have, st.missed, st.dropped = last, res.at.UnixNano(), true, 0, false
				s.refuse(p, reason, msg)
				continue
			}
			x.delta += delta(st, res.snap, p.fromZero)
			x.inFlight += res.snap.InFlight
			x.busyFor = max(x.busyFor, res.snap.BusyFor)
			st.last, st.lastAt, st.have, st.missed, st.dropped = res.snap, res.at.UnixNano(), true, 0, false
			if st.refused != "" {
				st.refused = ""
				s.log.Info("sidecar's figures plausible again: counted", "pod", p.key, "app", p.app.key.Name)
			}
			continue
		}
		failed++
		if st.res.refused != "" {
			s.refuse(p, st.res.refused, st.res.err.Error())
		}
		if !st.have {
			continue // never answered: nothing to keep (a sidecar still starting)
		}
		st.missed++
		if st.missed <= s.opts.StaleTicks {
			x.inFlight += st.last.InFlight
			x.stale++
			continue
		}
		x.dropped++
		if !st.dropped {
			st.dropped = true
			s.metrics.droppedPods.Inc()
			s.log.Info("sidecar stopped answering: its last in-flight count is no longer counted",
				"pod", p.key, "app", p.app.key.Name, "ticks", st.missed, "lastInFlight", st.last.InFlight, "error", st.res.err.Error())
		}
	}
	s.metrics.slowPods.Set(float64(slow))
	s.metrics.readErrors.Add(float64(failed))

	cutoff := now.Add(-s.opts.MaxRateWindow)
	for _, a := range r.apps {
		x := s.acc[a]
		if x == nil {
			x = &appAcc{}
		}
		a.mu.Lock()
		a.inFlight, a.busyFor, a.pods, a.readyPods, a.stalePods, a.droppedPods, a.bypassedPods = x.inFlight, x.busyFor, x.pods, x.ready, x.stale, x.dropped, x.bypassed
		a.refusedPods = x.refused
		if x.delta > 0 {
			a.counted += x.delta
			a.hist.add(now, a.counted)
		}
		a.hist.prune(cutoff)
		if x.inFlight > 0 || x.delta > 0 || x.bypassed > 0 || a.held > 0 {
			a.lastBusy = now
		}
		if a.watchers > 0 {
			a.notifyLocked() // the window moved: watchers re-evaluate
		}
		a.mu.Unlock()
	}
	s.firstTick.CompareAndSwap(0, now.UnixNano())
}

// lane moves p between the tick's lane and the slow lane after its read
// (see readAll).
func (s *Scaler) lane(p *pod) {
	st, res := &p.readState, &p.readState.res
	switch {
	case res.pending:
	case res.slow && !st.slow:
		st.slow, st.good = true, 0
		p.bg.res.Store(nil) // a result left from an earlier stay in the slow lane
		st.strikes = min(st.strikes+1, maxStrikes)
		if res.err == nil {
			// Slow but within --read-timeout: a loaded node or scaler,
			// worth neither an event nor a line at info level.
			s.log.V(1).Info("sidecar read slowly: read off the tick for a while", "pod", p.key, "app", p.app.key.Name, "fastReadsToReturn", 1<<st.strikes)
			return
		}
		s.log.Info("sidecar read timed out: read off the tick from now on", "pod", p.key, "app", p.app.key.Name,
			"fastReadsToReturn", 1<<st.strikes, "error", res.err.Error())
		why := res.err.Error()
		s.podEvents.report(p, ReasonStatsSlow, "slow", fmt.Sprintf("ebb-scaler's read of this pod's %s (GET /stats, app %s) was slow: %s. It is read off the scaler's tick until %d reads in a row are fast, so its figures may be a tick old.", SidecarContainer, p.app.key.Name, why, 1<<st.strikes), time.Now())
	case res.slow:
		st.good = 0
	case st.slow && res.ok:
		st.good++
		if st.good >= 1<<st.strikes {
			st.slow = false
		}
	}
}

// maxStrikes caps the fast reads a slow pod needs to return to the tick's
// lane at 2^8 (maxProbation ticks).
const maxStrikes = 8
