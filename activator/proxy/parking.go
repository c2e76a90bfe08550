package proxy

import (
	"container/heap"
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Parking holds HTTP/1.x requests without a goroutine, a net/http
// connection or a timer each, so that 10,000 held requests cost a few MiB:
// the handler hijacks the connection, re-serializes the request head (plus
// whatever net/http had buffered past it: a body start, a pipelined request)
// and returns. A parked request is then only a small struct, its socket, an
// entry in one deadline heap served by one timer, and a registration in one
// epoll set that reports the client hanging up (EPOLLRDHUP) without reading
// the request body. When the app has a ready pod, when the cold-start timeout
// passes, or when its AppRoute is deleted, the connection is handed to the
// re-entry server, an http.Server of the Router that reads the head again
// from the saved bytes and answers it like any other request (forwarding
// it, or 504/503), then serves the connection's next requests.
//
// HTTP/2 streams (h2c, gRPC) cannot be hijacked: they wait in their handler
// goroutine, and net/http cancels their context when the client resets the
// stream or the connection drops. Platforms without epoll do the same.

type verdict uint8

const (
	released verdict = iota + 1
	timedOut
	routeGone
)

// parked is one held HTTP/1.x request whose connection was hijacked.
type parked struct {
	conn       net.Conn
	head       []byte // the request head, then the bytes net/http had buffered
	a          *app
	start      time.Time
	deadline   time.Time
	timeout    time.Duration
	token      uint64
	hidx       int     // index in parking.heap
	prev, next *parked // a's list, guarded by parking.mu
	polled     bool    // registered with the poller
}

// poller reports, by token, clients that hang up on a parked connection.
type poller interface {
	add(c net.Conn, token uint64) error
	del(c net.Conn)
	close()
}

// parking is the Router's parked requests.
type parking struct {
	d *Router

	startOnce sync.Once
	startErr  error
	re        *reentry
	srv       *http.Server

	mu      sync.Mutex
	poll    poller
	closed  bool
	nextTok uint64
	byTok   map[uint64]*parked
	heap    deadlineHeap
	timer   *time.Timer
	lists   map[*app]*parked // first parked request of each app
}

func (pk *parking) start() error {
	pk.startOnce.Do(func() {
		poll, err := newPoller(pk.hangup)
		if err != nil {
			pk.startErr = err
			return
		}
		pk.mu.Lock() // releaseParked and shutdown read these under pk.mu
		pk.poll = poll
		pk.byTok = map[uint64]*parked{}
		pk.lists = map[*app]*parked{}
		pk.timer = time.AfterFunc(time.Hour, pk.expire)
		pk.timer.Stop()
		pk.mu.Unlock()
		pk.re = newReentry()
		pk.srv = &http.Server{
			Handler:           http.HandlerFunc(pk.d.serveReentered),
			ConnContext:       func(ctx context.Context, c net.Conn) context.Context { return context.WithValue(ctx, reentryKey{}, c) },
			ReadHeaderTimeout: 10 * time.Second,
			IdleTimeout:       120 * time.Second,
			// Heads were accepted by the data server already; the re-serialized
			// one may be a little longer than the original.
			MaxHeaderBytes: 2 << 20,
		}
		pk.srv.Protocols = new(http.Protocols)
		pk.srv.Protocols.SetHTTP1(true)
		go pk.srv.Serve(pk.re)
	})
	return pk.startErr
}

// park hijacks r's connection and parks it; false means it could not, and
// the caller holds r in its handler instead.
func (d *Router) park(w http.ResponseWriter, r *http.Request, a *app, start time.Time, timeout time.Duration) bool {
	if r.ProtoMajor != 1 {
		return false
	}
	hj, ok := w.(http.Hijacker)
	if !ok || d.parking.start() != nil {
		return false
	}
	head := appendHead(make([]byte, 0, headSize(r)), r)
	conn, brw, err := hj.Hijack()
	if err != nil {
		return false
	}
	if n := brw.Reader.Buffered(); n > 0 {
		b, _ := brw.Reader.Peek(n)
		head = append(head, b...)
	}
	p := &parked{conn: conn, head: head, a: a, start: start, deadline: start.Add(timeout), timeout: timeout}
	if !d.parking.add(p) {
		d.leave(a)
		conn.Close()
		return true
	}
	// A ready pod or a deletion may have come between admit and add.
	if a.pick() != nil || a.gone.Load() {
		d.releaseParked(a)
	}
	return true
}

func (pk *parking) add(p *parked) bool {
	pk.mu.Lock()
	defer pk.mu.Unlock()
	if pk.closed {
		return false
	}
	pk.nextTok++
	p.token = pk.nextTok
	pk.byTok[p.token] = p
	p.next = pk.lists[p.a]
	if p.next != nil {
		p.next.prev = p
	}
	pk.lists[p.a] = p
	heap.Push(&pk.heap, p)
	if p.hidx == 0 {
		pk.timer.Reset(time.Until(p.deadline))
	}
	// A client gone already is reported at once (level-triggered).
	p.polled = pk.poll.add(p.conn, p.token) == nil
	return true
}

// takeLocked removes p from every structure; false if someone took it
// first. Callers hold pk.mu.
func (pk *parking) takeLocked(p *parked) bool {
	if pk.byTok[p.token] != p {
		return false
	}
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
	}
	p.prev, p.next = nil, nil
	if p.polled {
		pk.poll.del(p.conn)
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
	p.conn.Close()
	pk.d.leave(p.a) // the client left: its slot is free at once
	pk.d.opts.Metrics.canceled.Inc()
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
	if len(pk.heap) > 0 {
		pk.timer.Reset(time.Until(pk.heap[0].deadline))
	}
	pk.mu.Unlock()
	m := pk.d.opts.Metrics
	for _, p := range due {
		pk.d.leave(p.a)
		m.timedOut.Inc()
		m.timeouts.WithLabelValues(p.a.key.Namespace, p.a.key.Name).Inc()
		msg := fmt.Sprintf("ebb-activator: app %s had no ready pod after %s (cold-start timeout %s)", p.a.key, now.Sub(p.start).Round(time.Millisecond), p.timeout)
		pk.re.push(&replayConn{Conn: p.conn, pending: p.head, verdict: timedOut, msg: msg})
	}
}

// releaseParked hands a's parked requests to the re-entry server if a has a
// ready pod (they are forwarded) or is gone (503).
func (d *Router) releaseParked(a *app) {
	pk := &d.parking
	var v verdict
	var msg string
	switch {
	case a.pick() != nil:
		v = released
	case a.gone.Load():
		v, msg = routeGone, fmt.Sprintf("ebb-activator: the AppRoute of app %s was deleted while the request was held", a.key)
	default:
		return
	}
	pk.mu.Lock()
	if pk.lists == nil {
		pk.mu.Unlock()
		return
	}
	var out []*parked
	for p := pk.lists[a]; p != nil; {
		next := p.next
		pk.takeLocked(p)
		out = append(out, p)
		p = next
	}
	pk.mu.Unlock()
	for _, p := range out {
		d.leave(a)
		pk.re.push(&replayConn{Conn: p.conn, pending: p.head, verdict: v, msg: msg, heldAt: p.start})
	}
}

// shutdown closes the parked connections still held and stops the re-entry
// server once it has nothing in flight, or when ctx ends.
func (pk *parking) shutdown(ctx context.Context) error {
	pk.mu.Lock()
	if pk.byTok == nil || pk.closed {
		pk.closed = true
		pk.mu.Unlock()
		return nil
	}
	pk.closed = true
	var left []*parked
	for _, p := range pk.byTok {
		left = append(left, p)
	}
	for _, p := range left {
		pk.takeLocked(p)
	}
	pk.timer.Stop()
	pk.poll.close()
	pk.mu.Unlock()
	for _, p := range left {
		p.conn.Close()
		pk.d.leave(p.a)
	}
	err := pk.srv.Shutdown(ctx)
	if err != nil {
		pk.srv.Close()
	}
	return err
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

// headSize estimates the length of r's re-serialized head.
func headSize(r *http.Request) int {
	n := len(r.Method) + len(r.RequestURI) + len(r.Proto) + len(r.Host) + 64
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

// appendHead writes r's head as net/http read it: the request line as
// received, Host, every header, and the framing net/http took out of the
// header map (Transfer-Encoding, Trailer). Header values were validated by
// net/http, so they hold no CR or LF.
func appendHead(b []byte, r *http.Request) []byte {
	b = append(b, r.Method...)
	b = append(b, ' ')
	b = append(b, r.RequestURI...)
	b = append(b, ' ')
	b = append(b, r.Proto...)
	b = append(b, "\r\n"...)
	if r.Host != "" {
		b = append(b, "Host: "...)
		b = append(b, r.Host...)
		b = append(b, "\r\n"...)
	}
	for k, vs := range r.Header {
		for _, v := range vs {
			b = append(b, k...)
			b = append(b, ": "...)
			b = append(b, v...)
			b = append(b, "\r\n"...)
		}
	}
	if len(r.TransferEncoding) > 0 {
		b = append(b, "Transfer-Encoding: "...)
		b = append(b, strings.Join(r.TransferEncoding, ", ")...)
		b = append(b, "\r\n"...)
	}
	if len(r.Trailer) > 0 {
		b = append(b, "Trailer: "...)
		first := true
		for k := range r.Trailer {
			if !first {
				b = append(b, ", "...)
			}
			first = false
			b = append(b, k...)
		}
		b = append(b, "\r\n"...)
	}
	return append(b, "\r\n"...)
}

type reentryKey struct{}

// replayConn is a parked connection handed back to HTTP: it reads the saved
// head first, then the socket; verdict answers its first request.
type replayConn struct {
	net.Conn
	pending []byte
	verdict verdict
	msg     string
	heldAt  time.Time // when its first request was held
}

func (c *replayConn) Read(b []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(b, c.pending)
		c.pending = c.pending[n:]
		if len(c.pending) == 0 {
			c.pending = nil
		}
		return n, nil
	}
	return c.Conn.Read(b)
}

// CloseWrite lets net/http half-close the socket as it does its own.
func (c *replayConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// serveReentered answers a request read again from a parked connection:
// the first one with its verdict, the next ones like any request.
func (d *Router) serveReentered(w http.ResponseWriter, r *http.Request) {
	c, _ := r.Context().Value(reentryKey{}).(*replayConn)
	if c == nil || c.verdict == 0 {
		d.ServeHTTP(w, r)
		return
	}
	v, msg, heldAt := c.verdict, c.msg, c.heldAt
	c.verdict, c.msg = 0, ""
	switch v {
	case timedOut:
		http.Error(w, msg, http.StatusGatewayTimeout)
	case routeGone:
		http.Error(w, msg, http.StatusServiceUnavailable)
	default:
		d.serve(w, r, heldAt)
	}
}

// reentry is the listener of the re-entry server: it accepts the parked
// connections pushed to it.
type reentry struct {
	mu     sync.Mutex
	q      []net.Conn
	closed bool
	ready  chan struct{}
	done   chan struct{}
}

func newReentry() *reentry {
	return &reentry{ready: make(chan struct{}, 1), done: make(chan struct{})}
}

func (l *reentry) push(c net.Conn) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		c.Close()
		return
	}
	l.q = append(l.q, c)
	l.mu.Unlock()
	select {
	case l.ready <- struct{}{}:
	default:
	}
}

func (l *reentry) Accept() (net.Conn, error) {
	for {
		l.mu.Lock()
		if len(l.q) > 0 {
			c := l.q[0]
			l.q[0] = nil
			l.q = l.q[1:]
			if len(l.q) == 0 {
				l.q = nil
			}
			l.mu.Unlock()
			return c, nil
		}
		closed := l.closed
		l.mu.Unlock()
		if closed {
			return nil, net.ErrClosed
		}
		select {
		case <-l.ready:
		case <-l.done:
		}
	}
}

func (l *reentry) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.closed = true
		close(l.done)
		for _, c := range l.q {
			c.Close()
		}
		l.q = nil
	}
	return nil
}

func (l *reentry) Addr() net.Addr { return reentryAddr{} }

type reentryAddr struct{}

func (reentryAddr) Network() string { return "reentry" }
func (reentryAddr) String() string  { return "activator-reentry" }
