package activator

import (
	"context"
	"net"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	"github.com/ebb-dev/ebb/activator/proxy"
)

// drain is what a terminating activator does, in three steps, so that
// none of its clients sees a refused or cut connection:
//
//  1. Accepting: it is not ready (/readyz), every response closes its
//     connection, and the data port keeps accepting until kube-proxy no
//     longer routes to it: until no hand-off slice has listed it and no
//     new connection has come for the drain delay. Its own slices say
//     whether kube-proxy may still route to it (the elected replica drops
//     a terminating pod from them at once); the delay covers kube-proxy's
//     sync lag (its minimum sync period, 1 s, plus the time to apply its
//     rules) and any other consumer of the slices still sending. A quiet
//     period alone would close the port between two requests of sparse
//     traffic while kube-proxy still sends there; the slices alone would
//     not see that lag. This step lasts at most the drain timeout, so a
//     request taken during it is still held for its whole cold-start
//     timeout before the deadline.
//  2. Holding: the port is closed; each held request is kept until it is
//     answered (its app has a ready pod, or its cold-start timeout passes
//     and it gets 504), and every released or proxied request until it
//     has its answer.
//  3. At the deadline, the cold-start timeout plus the drain timeout after
//     SIGTERM, a request still held (its app's own cold-start timeout is
//     longer) is answered 503 with Retry-After; connections left after a
//     short grace are cut. The chart's termination grace period is that
//     deadline plus 10 s.
type drain struct {
	log  logr.Logger
	data *proxy.Server
	// accepts is the data port's listener, which notes its last accept.
	accepts *acceptClock
	// routed reports whether a hand-off slice lists this replica.
	routed func() bool
	// delay, coldStart, timeout: --drain-delay, --cold-start-timeout,
	// --drain-timeout.
	delay, coldStart, timeout time.Duration
}

// run drains from start (SIGTERM) and returns once every request taken
// has been answered, or soon after the deadline.
func (d drain) run(start time.Time) {
	deadline := start.Add(d.coldStart + d.timeout)
	d.data.CloseAfterResponses()
	d.log.Info("draining: accepting until kube-proxy no longer routes here", "delay", d.delay.String(), "deadline", deadline.Format(time.RFC3339))
	why := d.accept(start)
	d.log.Info("draining: no longer accepting; answering what is held and in flight", "why", why, "accepted", time.Since(start).Round(time.Millisecond).String())
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	err := d.data.Shutdown(ctx)
	d.log.Info("drained", "took", time.Since(start).Round(time.Millisecond).String(), "beforeDeadline", err == nil)
}

// accept waits until no hand-off slice has listed this replica and no
// connection has come for d.delay, or until d.timeout after start; it
// says which.
func (d drain) accept(start time.Time) string {
	bound := start.Add(d.timeout)
	quietFrom := start
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		now := time.Now()
		if d.routed() {
			quietFrom = now
		}
		if last := d.accepts.last(); last.After(quietFrom) {
			quietFrom = last
		}
		if now.Sub(quietFrom) >= d.delay {
			return "not in a hand-off slice and no new connection for the drain delay"
		}
		if !now.Before(bound) {
			return "the drain timeout passed"
		}
		<-tick.C
	}
}

// acceptClock is a listener that notes when it last accepted.
type acceptClock struct {
	net.Listener
	at atomic.Int64 // Unix nanoseconds
}

func (l *acceptClock) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.at.Store(time.Now().UnixNano())
	}
	return c, err
}

func (l *acceptClock) last() time.Time {
	if ns := l.at.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}
