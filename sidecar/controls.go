package sidecar

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ebb-dev/ebb/internal/staticanswer"
)

// controls are the route controls a sidecar was given (static responses,
// a concurrency limit, a request timeout). The proxy holds nil when none
// is set, so that the request path pays one branch for all of them.
type controls struct {
	static *staticanswer.Set // nil: none
	// answered are the static responses' series, one per rule, created
	// on its first answer.
	answered    []atomic.Pointer[staticCounter]
	answeredVec *prometheus.CounterVec
	lim         *limiter // nil: no limit
	timeout     time.Duration
	// exempt are the requests at the app that an AtZero rule leaves out of
	// the counts: the drain waits for them too.
	exempt atomic.Int64
}

type staticCounter struct{ prometheus.Counter }

// newControls returns the controls of opts, or nil when none is set.
func newControls(opts Options) *controls {
	set, _ := staticanswer.Parse(opts.StaticResponses) // validated with the options
	if set == nil && opts.Concurrency == 0 && opts.RequestTimeout == 0 {
		return nil
	}
	c := &controls{static: set, timeout: opts.RequestTimeout}
	if set != nil {
		c.answered = make([]atomic.Pointer[staticCounter], len(set.Rules()))
		c.answeredVec = prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ebb_sidecar_static_responses_total",
			Help: "Requests the sidecar answered itself by a static response rule (Always), by rule; they neither reach the app nor count as requests.",
		}, []string{"rule"})
	}
	if opts.Concurrency > 0 {
		c.lim = newLimiter(opts.Concurrency, opts.ConcurrencyQueue)
	}
	return c
}

// countAnswer counts a static answer of r.
func (c *controls) countAnswer(r *staticanswer.Rule) {
	i := r.Index()
	sc := c.answered[i].Load()
	if sc == nil {
		c.answered[i].CompareAndSwap(nil, &staticCounter{c.answeredVec.WithLabelValues(r.Name)})
		sc = c.answered[i].Load()
	}
	sc.Inc()
}

// collectors are the controls' metrics: a static response's series once
// it answered, the limit and the queue only when a limit is set.
func (c *controls) collectors() []prometheus.Collector {
	if c == nil {
		return nil
	}
	var cs []prometheus.Collector
	if c.answeredVec != nil {
		cs = append(cs, c.answeredVec)
	}
	if l := c.lim; l != nil {
		cs = append(cs,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "ebb_sidecar_concurrency_limit",
				Help: "The most requests the app is given at once (--concurrency); exported only when set.",
			}, func() float64 { return float64(l.limit) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "ebb_sidecar_queued_requests",
				Help: "Requests waiting for a place under the concurrency limit; they count as in flight.",
			}, func() float64 { return float64(l.queued.Load()) }),
		)
	}
	return cs
}

// limiter lets at most limit requests through at once; up to queueMax more
// wait, first come first served.
type limiter struct {
	limit, queueMax int
	queued          atomic.Int64 // len(waiters), for metrics and /stats

	mu      sync.Mutex
	active  int
	waiters []*waiter
}

// waiter is a queued request; ready is closed when it has its place.
type waiter struct{ ready chan struct{} }

func newLimiter(limit, queue int) *limiter {
	return &limiter{limit: limit, queueMax: queue}
}

// waitOutcome is how a wait for a place ended.
type waitOutcome uint8

const (
	admitted  waitOutcome = iota
	queueFull             // no place and the queue full: 503
	gaveUp                // the client left, or the deadline passed, while queued
)

// acquire takes a place for a request, waiting in the queue when there is
// none; wait blocks until ready is closed (true) or the request gives up
// (false). After admitted the caller calls release once.
func (l *limiter) acquire(wait func(ready <-chan struct{}) bool) waitOutcome {
	l.mu.Lock()
	if l.active < l.limit {
		l.active++
		l.mu.Unlock()
		return admitted
	}
	if len(l.waiters) >= l.queueMax {
		l.mu.Unlock()
		return queueFull
	}
	w := &waiter{ready: make(chan struct{})}
	l.waiters = append(l.waiters, w)
	l.queued.Add(1)
	l.mu.Unlock()
	if wait(w.ready) {
		return admitted
	}
	l.mu.Lock()
	for i, o := range l.waiters {
		if o == w {
			l.waiters = append(l.waiters[:i], l.waiters[i+1:]...)
			l.queued.Add(-1)
			l.mu.Unlock()
			return gaveUp
		}
	}
	l.mu.Unlock()
	// Given a place meanwhile: pass it on.
	l.release()
	return gaveUp
}

// release gives the place of a request that is done to the first one
// queued, or frees it.
func (l *limiter) release() {
	l.mu.Lock()
	if len(l.waiters) > 0 {
		w := l.waiters[0]
		l.waiters[0] = nil
		l.waiters = l.waiters[1:]
		l.queued.Add(-1)
		l.mu.Unlock()
		close(w.ready)
		return
	}
	l.active--
	l.mu.Unlock()
}

// waitCtx is a wait for a place that gives up when ctx ends.
func waitCtx(ctx context.Context) func(<-chan struct{}) bool {
	return func(ready <-chan struct{}) bool {
		select {
		case <-ready:
			return true
		case <-ctx.Done():
			return false
		}
	}
}

// queueFullBody is the answer's body when the queue is full.
func (l *limiter) queueFullBody() string {
	return "ebb-sidecar: the app is serving its concurrency limit (" + strconv.Itoa(l.limit) + ") and " +
		strconv.Itoa(l.queueMax) + " requests wait already; retry later\n"
}

// timeoutBody is the answer's body when the request timeout passed before
// the app's response head.
func timeoutBody(d time.Duration) string {
	return "ebb-sidecar: no response from the app within the request timeout (" + d.String() + ")\n"
}
