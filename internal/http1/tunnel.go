package http1

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultHalfCloseTimeout is Options.HalfCloseTimeout when it is zero: long
// enough for an app to finish what it sends after its client's FIN, short
// enough that an app that ignores the FIN does not stay counted.
const DefaultHalfCloseTimeout = 5 * time.Second

const tunnelBufSize = 32 << 10

// stallCheck is how often a write that makes no progress (the receiving
// side reads nothing) wakes to check that the client is still there.
const stallCheck = time.Second

var tunnelBufs = sync.Pool{New: func() any { b := make([]byte, tunnelBufSize); return &b }}

// tunnel connects client and app byte for byte after a 101; it counts as in
// flight all along. A side's FIN is passed on (CloseWrite); from then on
// the other side's silence is bounded by Options.HalfCloseTimeout. A reset,
// a failed write, the half-close timeout or Options.TunnelIdleTimeout
// closes both connections at once, and so does a write that has made no
// progress for the half-close timeout after the client went away.
func (cc *Conn) tunnel(uc *upConn) {
	defer uc.close()
	cc.c.SetReadDeadline(time.Time{})
	cc.c.SetWriteDeadline(time.Time{})
	uc.c.SetReadDeadline(time.Time{})
	cc.resp = append(cc.resp, '\r', '\n')
	if _, err := cc.c.Write(cc.resp); err != nil {
		return
	}
	cc.resp = cc.resp[:0]
	t := &tunnelState{idle: cc.streamIdleTimeout(), grace: cc.o.HalfCloseTimeout, client: cc.c}
	if t.grace <= 0 {
		t.grace = DefaultHalfCloseTimeout
	}
	now := time.Now().UnixNano()
	t.last.Store(now)
	t.up = half{src: cc.c, dst: uc.c, br: cc.br}
	t.down = half{src: uc.c, dst: cc.c, br: uc.br}
	t.up.last.Store(now)
	t.down.last.Store(now)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t.copy(&t.up, &t.down)
	}()
	t.copy(&t.down, &t.up)
	<-done
}

// tunnelState is one tunnel: its two directions and their timeouts.
type tunnelState struct {
	idle, grace time.Duration
	client      *net.TCPConn // the client's connection (up.src, down.dst)
	last        atomic.Int64 // unix nanos of the last byte either way
	up, down    half         // client to app, app to client
}

// half is one direction of a tunnel.
type half struct {
	src, dst *net.TCPConn
	br       *bufio.Reader // src, with what was read of it already
	last     atomic.Int64  // unix nanos of the last byte this way
	ended    atomic.Int64  // unix nanos of src's FIN; 0 before it
}

// copy moves bytes of h until its source ends (FIN: passed on, and the
// other direction's silence bounded from then on) or the tunnel is cut.
func (t *tunnelState) copy(h, other *half) {
	bp := tunnelBufs.Get().(*[]byte)
	defer tunnelBufs.Put(bp)
	buf := *bp
	var rdl time.Time // the deadline set on src
	for {
		// other.ended may change while the deadline is set: then compute
		// it again (the other side's wake-up could be lost otherwise).
		ended := other.ended.Load()
		if want := t.readDeadline(h, ended); want != rdl && (want.IsZero() || rdl.IsZero() || want.Before(rdl)) {
			h.src.SetReadDeadline(want)
			rdl = want
			if other.ended.Load() != ended {
				continue
			}
		}
		n, err := h.br.Read(buf)
		if n > 0 {
			now := time.Now()
			t.last.Store(now.UnixNano())
			h.last.Store(now.UnixNano())
			if werr := t.write(h, buf[:n], t.writeDeadline(now, other.ended.Load() != 0)); werr != nil {
				t.cut()
				return
			}
		}
		switch {
		case err == nil:
		case errors.Is(err, os.ErrDeadlineExceeded):
			rdl = time.Time{} // passed: set again
			if t.expired(h, other.ended.Load(), time.Now()) {
				t.cut()
				return
			}
		case err == io.EOF:
			h.dst.CloseWrite()
			h.ended.Store(time.Now().UnixNano())
			// Wake the other direction's read so that it takes the
			// half-close timeout.
			other.src.SetReadDeadline(time.Now())
			return
		default: // a reset, or the tunnel cut
			t.cut()
			return
		}
	}
}

// write writes p to h's destination by deadline dl (none if zero). A write
// that makes no progress wakes every stallCheck: once the client has been
// gone (a FIN or a reset) for the half-close timeout while nothing moves,
// the write fails, so an app that reads nothing cannot keep a tunnel whose
// client left in flight (no read of either side would wake to see it).
func (t *tunnelState) write(h *half, p []byte, dl time.Time) error {
	var gone time.Time // when the client was first seen gone, while stalled
	for {
		wake := time.Now().Add(stallCheck)
		if !gone.IsZero() && gone.Add(t.grace).Before(wake) {
			wake = gone.Add(t.grace)
		}
		if !dl.IsZero() && dl.Before(wake) {
			wake = dl
		}
		h.dst.SetWriteDeadline(wake)
		n, err := h.dst.Write(p)
		p = p[n:]
		if err == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
			return err
		}
		now := time.Now()
		if !dl.IsZero() && !now.Before(dl) {
			return err
		}
		switch {
		case n > 0:
			gone = time.Time{}
		case !clientGone(t.client):
			gone = time.Time{}
		case gone.IsZero():
			gone = now
		case now.Sub(gone) >= t.grace:
			return err
		}
	}
}

// readDeadline is when h's read must wake to check the tunnel's timeouts:
// the idle timeout from the last byte either way, and once the other side
// has ended (at unix nanos ended), the half-close timeout from the later of
// its FIN and h's last byte. Zero: none applies. It may come early: the
// check decides.
func (t *tunnelState) readDeadline(h *half, ended int64) time.Time {
	var dl int64
	if t.idle > 0 {
		dl = t.last.Load() + int64(t.idle)
	}
	if ended != 0 {
		g := max(ended, h.last.Load()) + int64(t.grace)
		if dl == 0 || g < dl {
			dl = g
		}
	}
	if dl == 0 {
		return time.Time{}
	}
	return time.Unix(0, dl)
}

// expired reports whether a timeout of the tunnel has passed for h at now.
func (t *tunnelState) expired(h *half, ended int64, now time.Time) bool {
	dl := t.readDeadline(h, ended)
	return !dl.IsZero() && !now.Before(dl)
}

// writeDeadline bounds a write of a piece: by the idle timeout, and by the
// half-close timeout once the receiving side has ended its half (it may
// not read any more).
func (t *tunnelState) writeDeadline(now time.Time, dstEnded bool) time.Time {
	var d time.Duration
	if t.idle > 0 {
		d = t.idle
	}
	if dstEnded && (d == 0 || t.grace < d) {
		d = t.grace
	}
	if d == 0 {
		return time.Time{}
	}
	return now.Add(d)
}

// cut closes both connections: the other direction's read or write fails
// and it returns.
func (t *tunnelState) cut() {
	t.up.src.Close()
	t.down.src.Close()
}
