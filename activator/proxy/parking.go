package proxy

import (
	"cmp"
	"container/heap"
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	h1 "github.com/ebb-dev/ebb/internal/http1"
	"github.com/ebb-dev/ebb/internal/reqmetrics"
	"github.com/ebb-dev/ebb/internal/tracing"
)

// Parking holds HTTP/1.x requests in the engine (internal/http1) that
// parsed them, without a goroutine, a timer or a second parse each, so
// that 10,000 held requests cost a few MiB: the engine parks the request
// (h1.Conn.Park) with its head for the app as built by its one parse, and
// its goroutine ends. A parked request is then only two small structs
// (this package's and the engine's h1.Parked), its socket, an entry in
// one deadline heap served by one timer, and a registration in one epoll
// set that reports the client hanging up (EPOLLRDHUP) without reading the
// request body. When the app
// has a ready pod, when the cold-start timeout passes, or when its
// AppRoute is deleted, it resumes in a goroutine of its own
// (h1.Parked.Resume): the request is sent by the engine to the ready pod,
// as warm requests are, or answered 504/503, and the connection goes on
// serving its next requests.
//
// HTTP/2 streams (h2c, gRPC), and the few HTTP/1.x requests the engine
// hands to net/http (targets not in origin form, no Host), wait in their
// handler goroutine, and net/http cancels their context when the client
// resets the stream or the connection drops. Without epoll (not Linux),
// parked requests are not watched: a client that leaves frees its slot
// at the release or the timeout.

type verdict uint8

const (
	released verdict = iota + 1
	timedOut
	routeGone
	shuttingDown // the activator exits before the app is ready: 503
)

// parked is one held HTTP/1.x request, parked in the engine.
type parked struct {
	hp         *h1.Parked
	a          *app
	start      time.Time
	deadline   time.Time
	timeout    time.Duration
	token      uint64
	size       int64   // h1.Conn.ParkSize, counted in Router.heldBytes
	hidx       int     // index in parking.heap
	prev, next *parked // a's list, oldest first, guarded by parking.mu
	polled     bool    // registered with the poller
	// up is the endpoint whose slot releaseParked took for it (an app
	// with a concurrency limit); nil: forwardParked picks one.
	up *upstream
}

// poller reports, by token, clients that hang up on a parked connection.
type poller interface {
	add(c net.Conn, token uint64) error
	del(c net.Conn)
	close()
}

// parking is the Router's parked requests.
type parking struct {
	router *Router

	startOnce sync.Once

	mu      sync.Mutex
	poll    poller // nil without epoll
	closed  bool
	nextTok uint64
	byTok   map[uint64]*parked
	heap    deadlineHeap
	timer   *time.Timer
	lists   map[*app]*parked // oldest parked request of each app
	tails   map[*app]*parked // newest parked request of each app
	// resumed are the requests taken out of parking and being answered,
	// by request: a connection resumed, parked again and resumed again
	// before the first Resume returned is here twice.
	resumed map[*parked]struct{}
	// out counts the requests taken out of parking to be answered (by
	// resume) until their connection is done; taken with them under mu,
	// so that held + out never reads 0 while one is on its way.
	out atomic.Int64
}

func (pk *parking) start() {
	pk.startOnce.Do(func() {
		poll, err := newPoller(pk.hangup)
		if err != nil {
			pk.router.opts.Log.V(1).Info("held requests are not watched for their client leaving", "reason", err.Error())
			poll = nil
		}
		pk.mu.Lock() // releaseParked and shutdown read these under pk.mu
		pk.poll = poll
		pk.byTok = map[uint64]*parked{}
		pk.lists = map[*app]*parked{}
		pk.tails = map[*app]*parked{}
		pk.resumed = map[*parked]struct{}{}
		pk.timer = time.AfterFunc(time.Hour, pk.expire)
		pk.timer.Stop()
		pk.mu.Unlock()
	})
}

// holdH1 holds a request the engine parsed, for app a that has no ready
// endpoint: the placeholder page for a browser if a asks for one, 503 with
// Retry-After when a queue is full, or the request parked. It returns
// what ServeRequest returns. again is the request as it was parked before
// when it is held again (released, and its app's ready endpoints went
// before it was sent): it keeps its start and deadline, so that an app
// whose endpoints flap cannot hold it past its cold-start timeout; nil
// for a new request.
func (rt *Router) holdH1(cc *h1.Conn, rq *h1.Request, a *app, again *parked) bool {
	cfg := a.cfg.Load()
	if (cfg.Placeholder || cfg.Page != nil) && string(cc.Method()) == http.MethodGet {
		if accept, _ := cc.Header("accept"); strings.Contains(string(accept), "text/html") {
			rt.opts.Metrics.placeholder.Inc()
			rt.placeholderHold(a)
			if p := cfg.Page; p != nil {
				return cc.Answer(p.Status, p.lines, p.Body)
			}
			return cc.Answer(http.StatusServiceUnavailable, placeholderHeader, placeholderPage(a))
		}
	}
	timeout := cmp.Or(cfg.ColdStartTimeout, rt.opts.ColdStartTimeout)
	// Taken before admission, which may start a cold start (and tell the
	// scaler) at this very time: the first request's wait is the cold start.
	now := time.Now()
	start, deadline := now, now.Add(timeout)
	if again != nil {
		start, deadline, timeout = again.start, again.deadline, again.timeout
		if !deadline.After(now) {
			msg := rt.timedOutMsg(a, now.Sub(start), timeout)
			if cfg.Fallback != "" {
				return rt.fallbackH1(cc, rq, a, http.StatusGatewayTimeout, "", msg, rt.opts.Metrics.countTimeout)
			}
			rt.opts.Metrics.countTimeout(a)
			return cc.Answer(http.StatusGatewayTimeout, "", msg)
		}
	}
	why := rt.admitHeld(a, now)
	size := int64(cc.ParkSize())
	if why == "" && rt.heldBytes.Add(size) > rt.opts.MaxHeldBytes {
		rt.heldBytes.Add(-size)
		rt.leave(a)
		why = fmt.Sprintf("the activator holds its maximum of %d bytes of held requests", rt.opts.MaxHeldBytes)
	}
	if why != "" {
		header, msg := "Retry-After: "+rt.retryAfter()+"\r\n", "ebb-activator: "+why+"; retry later\n"
		if cfg.Fallback != "" && !rt.stopping() {
			return rt.fallbackH1(cc, rq, a, http.StatusServiceUnavailable, header, msg, rt.opts.Metrics.countRejected)
		}
		rt.opts.Metrics.countRejected(a)
		return cc.Answer(http.StatusServiceUnavailable, header, msg)
	}
	return cc.Park(func(hp *h1.Parked) { rt.parkConn(hp, a, start, deadline, timeout, size) })
}

// parkConn keeps the request the engine parked, hp.
func (rt *Router) parkConn(hp *h1.Parked, a *app, start, deadline time.Time, timeout time.Duration, size int64) {
	p := &parked{hp: hp, a: a, start: start, deadline: deadline, timeout: timeout, size: size}
	if !rt.parking.add(p) {
		rt.heldBytes.Add(-size)
		rt.leave(a)
		hp.Drop()
		return
	}
	// A ready pod or a deletion may have come between admit and add.
	if a.pick() != nil || a.gone.Load() {
		rt.releaseParked(a)
	}
}

func (pk *parking) add(p *parked) bool {
	pk.start()
	pk.mu.Lock()
	defer pk.mu.Unlock()
	if pk.closed {
		return false
	}
	pk.nextTok++
	p.token = pk.nextTok
	pk.byTok[p.token] = p
	if last := pk.tails[p.a]; last != nil {
		last.next, p.prev = p, last
	} else {
		pk.lists[p.a] = p
	}
	pk.tails[p.a] = p
	heap.Push(&pk.heap, p)
	if p.hidx == 0 {
		pk.timer.Reset(time.Until(p.deadline))
	}
	// A client gone already is reported at once (level-triggered).
	p.polled = pk.poll != nil && pk.poll.add(p.hp.NetConn(), p.token) == nil
	return true
}

// takeLocked removes p from every structure; false if someone took it
// first. Callers hold pk.mu.
func (pk *parking) takeLocked(p *parked) bool {
	if pk.byTok[p.token] != p {
		return false
	}
	pk.router.heldBytes.Add(-p.size)
	delete(pk.byTok, p.token)
	heap.Remove(&pk.heap, p.hidx)
	if p.prev != nil {
		p.prev.next = p.next
	} else if p.next != nil {
		pk.lists[p.a] = p.next
	} else {
		delete(pk.lists, p.a)
	}
	if p.next != nil {
		p.next.prev = p.prev
	} else if p.prev != nil {
		pk.tails[p.a] = p.prev
	} else {
		delete(pk.tails, p.a)
	}
	p.prev, p.next = nil, nil
	if p.polled {
		pk.poll.del(p.hp.NetConn())
	}
	return true
}

// hangup is the poller's report that the client of token left.
func (pk *parking) hangup(token uint64) {
	pk.mu.Lock()
	p := pk.byTok[token]
	ok := p != nil && pk.takeLocked(p)
	pk.mu.Unlock()
	if !ok {
		return
	}
	p.hp.Drop()
	pk.router.leave(p.a) // the client left: its slot is free at once
	pk.router.opts.Metrics.canceled.Inc()
}

// expire answers the parked requests whose cold-start timeout passed.
func (pk *parking) expire() {
	now := time.Now()
	var due []*parked
	pk.mu.Lock()
	for len(pk.heap) > 0 && !pk.heap[0].deadline.After(now) {
		p := pk.heap[0]
		pk.takeLocked(p)
		due = append(due, p)
	}
	pk.out.Add(int64(len(due)))
	if len(pk.heap) > 0 {
		pk.timer.Reset(time.Until(pk.heap[0].deadline))
	}
	pk.mu.Unlock()
	for _, p := range due {
		pk.router.leave(p.a)
		pk.resume(p, timedOut, pk.router.timedOutMsg(p.a, now.Sub(p.start), p.timeout))
	}
}

// releaseParked resumes a's parked requests, oldest first, if a has a
// ready pod (they are forwarded) or is gone (503). With a concurrency
// limit, only as many are forwarded as a's ready pods have free slots
// (take); the rest wait for give.
func (rt *Router) releaseParked(a *app) {
	pk := &rt.parking
	var v verdict
	var msg string
	switch {
	case a.pick() != nil && !a.depsWait.Load():
		v = released
	case a.gone.Load():
		v, msg = routeGone, fmt.Sprintf("ebb-activator: the AppRoute of app %s was deleted while the request was held\n", a.key)
	default:
		return
	}
	if limit := a.cfg.Load().Concurrency; v == released && limit > 0 {
		for {
			first, ok := pk.oldest(a)
			if !ok {
				return
			}
			if w := a.oldestWaiter(); !w.IsZero() && w.Before(first) {
				return // an older HTTP/2 request, woken by give's broadcast, takes the slot
			}
			up := a.take(limit)
			if up == nil {
				return
			}
			ps := pk.take(a, 1)
			if len(ps) == 0 {
				rt.give(a, up)
				return
			}
			ps[0].up = up
			rt.leave(a)
			pk.resume(ps[0], v, msg)
		}
	}
	for _, p := range pk.take(a, -1) {
		rt.leave(a)
		pk.resume(p, v, msg)
	}
}

// oldest is the start of a's oldest parked request; false if none.
func (pk *parking) oldest(a *app) (time.Time, bool) {
	pk.mu.Lock()
	defer pk.mu.Unlock()
	if p := pk.lists[a]; p != nil {
		return p.start, true
	}
	return time.Time{}, false
}

// take takes up to n (all if n < 0) of a's parked requests out of the
// hold, oldest first, and counts them as out until each is answered
// (Shutdown waits for them).
func (pk *parking) take(a *app, n int) []*parked {
	pk.mu.Lock()
	defer pk.mu.Unlock()
	if pk.lists == nil {
		return nil
	}
	var out []*parked
	for p := pk.lists[a]; p != nil && len(out) != n; {
		next := p.next
		pk.takeLocked(p)
		out = append(out, p)
		p = next
	}
	pk.out.Add(int64(len(out)))
	return out
}

// resume serves p's connection again, in a goroutine of its own, first
// answering its held request by verdict v: forwarded, or msg with 504
// (timedOut), 503 (routeGone), 503 with Retry-After (shuttingDown). The
// caller took p out of parking and counted it in pk.out.
func (pk *parking) resume(p *parked, v verdict, msg string) {
	pk.mu.Lock()
	if pk.closed {
		pk.mu.Unlock()
		p.hp.Drop()
		pk.out.Add(-1)
		return
	}
	pk.resumed[p] = struct{}{}
	pk.mu.Unlock()
	go func() {
		defer func() {
			pk.mu.Lock()
			delete(pk.resumed, p)
			pk.mu.Unlock()
			pk.out.Add(-1)
		}()
		p.hp.Resume(func(cc *h1.Conn, rq *h1.Request) bool {
			switch v {
			case timedOut:
				if p.a.cfg.Load().Fallback != "" {
					return pk.router.fallbackH1(cc, rq, p.a, http.StatusGatewayTimeout, "", msg, pk.router.opts.Metrics.countTimeout)
				}
				pk.router.opts.Metrics.countTimeout(p.a)
				return cc.Answer(http.StatusGatewayTimeout, "", msg)
			case routeGone:
				return cc.Answer(http.StatusServiceUnavailable, "", msg)
			case shuttingDown:
				return cc.Answer(http.StatusServiceUnavailable, "Retry-After: "+pk.router.retryAfter()+"\r\n", msg)
			}
			return pk.router.forwardParked(cc, rq, p)
		})
	}()
}

// forwardParked sends the request of p, held since heldAt, to a ready
// endpoint of its app a through the engine, as a warm request goes; notes its first response
// byte (the first one ends the cold start), records it, and traces it: a
// span from heldAt to its response's end, continuing the request's trace
// (its one traceparent header), with a child span per phase of the cold
// start it waited on. With no ready endpoint any more (it went between
// the release and now), the request is held again, within its first
// deadline.
func (rt *Router) forwardParked(cc *h1.Conn, rq *h1.Request, p *parked) bool {
	a, heldAt := p.a, p.start
	limit, up := a.cfg.Load().Concurrency, p.up
	slotted := up != nil // releaseParked took a slot on up for it
	p.up = nil
	if slotted && (limit <= 0 || !a.inReady(up) || a.depsWait.Load()) {
		// The slot's pod went, or the limit was lifted, since the release.
		rt.give(a, up)
		up, slotted = nil, false
	}
	if up == nil && !a.depsWait.Load() {
		up = a.take(limit)
		slotted = up != nil && limit > 0
	}
	if up == nil || a.depsWait.Load() {
		if slotted {
			rt.give(a, up)
		}
		if a.gone.Load() {
			return cc.Answer(http.StatusServiceUnavailable, "", fmt.Sprintf("ebb-activator: the AppRoute of app %s was deleted while the request was held\n", a.key))
		}
		return rt.holdH1(cc, rq, a, p)
	}
	rt.opts.Metrics.released.Inc()
	cc.DelHeader(fallbackHop)
	var span trace.Span
	if rt.opts.Tracer != nil {
		ctx := context.Background()
		tp, n := cc.TraceParent()
		if n == 1 {
			ctx = tracing.Propagator.Extract(ctx, tracing.Bytes(tp))
		}
		_, span = rt.opts.Tracer.Start(ctx, "ebb-activator hold",
			trace.WithTimestamp(heldAt), trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("ebb.app", a.key.String()), attribute.String("server.address", string(cc.Host()))))
		if sc := span.SpanContext(); sc.IsSampled() && n <= 1 {
			var b [tracing.TraceParentLen]byte
			cc.SetTraceParent(tracing.TraceParent(b[:0], sc))
		}
	}
	cc.SetTimeouts(rt.timeouts(a))
	m, ok := a.heldMarks(heldAt)
	var head time.Time
	cc.OnResponseHead(func(int) {
		head = time.Now()
		rt.firstByte(a, head)
	})
	if slotted {
		defer rt.give(a, up) // given back even if the exchange panics (the engine recovers)
	}
	keep := cc.RoundTrip(up.pool, rq)
	proto := reqmetrics.HTTP1
	if cc.Status() == http.StatusSwitchingProtocols {
		proto = reqmetrics.Upgrade
	}
	rt.opts.Requests.Observe(proto, cc.Status(), heldAt)
	if span != nil {
		rt.traceHeld(span, m, ok, heldAt, head)
		if code := cc.Status(); code != 0 {
			span.SetAttributes(attribute.Int("http.response.status_code", code))
		}
		if code := cc.Status(); code == 0 || code >= 500 {
			span.SetStatus(codes.Error, "")
		}
		span.End()
	}
	return keep
}

// retryAfter is the Retry-After value, in whole seconds (at least 1).
func (rt *Router) retryAfter() string {
	return strconv.Itoa(max(1, int(rt.opts.RetryAfter.Round(time.Second)/time.Second)))
}

// answerHeld answers every parked request 503 with Retry-After: the
// activator exits before their app is ready.
func (pk *parking) answerHeld() {
	pk.mu.Lock()
	var left []*parked
	for _, p := range pk.byTok {
		left = append(left, p)
	}
	for _, p := range left {
		pk.takeLocked(p)
	}
	pk.out.Add(int64(len(left)))
	pk.mu.Unlock()
	for _, p := range left {
		pk.router.leave(p.a)
		pk.resume(p, shuttingDown, pk.router.shuttingDown(p.a)+"\n")
	}
}

// cut closes the connections of every parked and resumed request at once;
// close also parks no more. It returns how many it closed.
func (pk *parking) cut(close bool) int {
	pk.mu.Lock()
	if close && !pk.closed {
		pk.closed = true
		if pk.timer != nil {
			pk.timer.Stop()
		}
		if pk.poll != nil {
			pk.poll.close()
		}
	}
	var left []*parked
	for _, p := range pk.byTok {
		left = append(left, p)
	}
	for _, p := range left {
		pk.takeLocked(p)
	}
	n := len(left) + len(pk.resumed)
	for p := range pk.resumed {
		p.hp.NetConn().Close()
	}
	pk.mu.Unlock()
	for _, p := range left {
		p.hp.Drop()
		pk.router.leave(p.a)
	}
	return n
}

// deadlineHeap orders parked requests by deadline.
type deadlineHeap []*parked

func (h deadlineHeap) Len() int           { return len(h) }
func (h deadlineHeap) Less(i, j int) bool { return h[i].deadline.Before(h[j].deadline) }
func (h deadlineHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].hidx, h[j].hidx = i, j
}
func (h *deadlineHeap) Push(x any) {
	p := x.(*parked)
	p.hidx = len(*h)
	*h = append(*h, p)
}
func (h *deadlineHeap) Pop() any {
	old := *h
	p := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	p.hidx = -1
	return p
}
