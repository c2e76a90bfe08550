package scaler

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ebb-dev/ebb/internal/stats"
)

const maxStatsBody = 256

var errTooLong = errors.New("stats body longer than 256 bytes")

// readAll reads every pod, ReadParallelism at a time, each within
// ReadTimeout; results land in each pod's readState.res.
func (s *Scaler) readAll(ctx context.Context, targets []*pod) {
	var next atomic.Int64
	workers := min(s.opts.ReadParallelism, len(targets))
	var wg sync.WaitGroup
	wg.Add(workers)
	for range workers {
		go func() {
			defer wg.Done()
			var buf [maxStatsBody]byte
			for {
				i := int(next.Add(1)) - 1
				if i >= len(targets) {
					return
				}
				p := targets[i]
				p.readState.res = s.readOne(ctx, p, buf[:])
			}
		}()
	}
	wg.Wait()
}

func (s *Scaler) readOne(ctx context.Context, p *pod, buf []byte) readResult {
	n, err := p.conn.get(ctx, s.dialer, s.opts.ReadTimeout, buf)
	if err != nil {
		return readResult{err: err}
	}
	snap, err := stats.Parse(buf[:n])
	if err != nil {
		return readResult{err: err}
	}
	return readResult{ok: true, snap: snap}
}

// delta is how many requests a pod counted since the scaler last read it.
// A new boot ID means the sidecar restarted: everything it counted since is
// new, so a smaller total is a reset, never a negative delta.
func delta(st *readState, snap stats.Snapshot, fromZero bool) uint64 {
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
	inFlight                              int64
	busyFor                               time.Duration
	delta                                 uint64
	pods, ready, stale, dropped, bypassed int
}

// tick reads every sidecar and publishes the per-app figures.
func (s *Scaler) tick(ctx context.Context) {
	start := time.Now()
	targets := s.reg.readable()
	s.readAll(ctx, targets)
	for _, p := range s.reg.takeRetired() {
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
	var failed int
	for _, p := range targets {
		if p.removed.Load() {
			continue
		}
		st, x := &p.readState, acc(p.app)
		if st.res.ok {
			x.delta += delta(st, st.res.snap, p.fromZero)
			x.inFlight += st.res.snap.InFlight
			x.busyFor = max(x.busyFor, st.res.snap.BusyFor)
			st.last, st.have, st.missed, st.dropped = st.res.snap, true, 0, false
			continue
		}
		failed++
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
	s.metrics.readErrors.Add(float64(failed))

	cutoff := now.Add(-s.opts.MaxRateWindow)
	for _, a := range r.apps {
		x := s.acc[a]
		if x == nil {
			x = &appAcc{}
		}
		a.mu.Lock()
		a.inFlight, a.busyFor, a.pods, a.readyPods, a.stalePods, a.droppedPods, a.bypassedPods = x.inFlight, x.busyFor, x.pods, x.ready, x.stale, x.dropped, x.bypassed
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
