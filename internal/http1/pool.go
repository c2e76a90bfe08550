package http1

import (
	"bufio"
	"fmt"
	"net"
	"sync"
	"time"
)

const (
	upstreamBufSize = 16 << 10
	// UpstreamIdleTimeout is how long a pooled connection may stay unused;
	// callers close older ones with CloseIdle.
	UpstreamIdleTimeout = 90 * time.Second
	// DialTimeout bounds connecting to an upstream.
	DialTimeout     = 2 * time.Second
	maxIdleUpstream = 1024
)

// upConn is one pooled connection to an upstream.
type upConn struct {
	c        *net.TCPConn
	br       *bufio.Reader
	lastUsed time.Time
}

func (uc *upConn) close() { uc.c.Close() }

// Upstream is the keep-alive connection pool to one upstream address, built
// once and shared by every request to it. It is a LIFO stack so that a few
// warm connections carry most requests.
//
// A connection goes back to the pool only after a response consumed
// exactly, with nothing read beyond it; it is taken out again only if
// nothing arrived on it meanwhile and it is still open (one non-blocking
// peek), so bytes an app sends unasked close its own connection and never
// reach another client.
type Upstream struct {
	addr   string
	dialer net.Dialer
	mu     sync.Mutex
	idle   []*upConn
	closed bool
}

// NewUpstream returns an empty pool for addr (host:port).
func NewUpstream(addr string) *Upstream {
	return &Upstream{
		addr: addr,
		// Loopback or pod network: no TCP keep-alive probes, a short
		// connect timeout.
		dialer: net.Dialer{Timeout: DialTimeout, KeepAlive: -1},
		idle:   make([]*upConn, 0, 64),
	}
}

// Addr is the upstream's host:port.
func (u *Upstream) Addr() string { return u.addr }

// Idle is the number of pooled connections.
func (u *Upstream) Idle() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.idle)
}

// get returns a clean pooled connection (reused=true) or a new one.
func (u *Upstream) get() (uc *upConn, reused bool, err error) {
	for {
		u.mu.Lock()
		n := len(u.idle)
		if n == 0 {
			u.mu.Unlock()
			break
		}
		uc = u.idle[n-1]
		u.idle[n-1] = nil
		u.idle = u.idle[:n-1]
		u.mu.Unlock()
		if clean(uc.c) {
			return uc, true, nil
		}
		uc.close()
	}
	uc, err = u.dial()
	return uc, false, err
}

func (u *Upstream) dial() (*upConn, error) {
	c, err := u.dialer.Dial("tcp", u.addr)
	if err != nil {
		return nil, fmt.Errorf("connect to the app: %w", err)
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		c.Close()
		return nil, fmt.Errorf("connect to the app: %T is not a TCP connection", c)
	}
	return &upConn{c: tc, br: bufio.NewReaderSize(tc, upstreamBufSize)}, nil
}

// put returns a connection whose last response was consumed exactly.
func (u *Upstream) put(uc *upConn, now time.Time) {
	if uc.br.Buffered() > 0 { // bytes nobody asked for: do not trust it
		uc.close()
		return
	}
	uc.lastUsed = now
	u.mu.Lock()
	if u.closed || len(u.idle) >= maxIdleUpstream {
		u.mu.Unlock()
		uc.close()
		return
	}
	u.idle = append(u.idle, uc)
	u.mu.Unlock()
}

// CloseIdle closes pooled connections idle for longer than maxIdle; with
// maxIdle 0 it closes them all and refuses later puts (connections in use
// close when their exchange ends).
func (u *Upstream) CloseIdle(now time.Time, maxIdle time.Duration) {
	u.mu.Lock()
	keep := u.idle[:0]
	var drop []*upConn
	for _, uc := range u.idle {
		if maxIdle > 0 && now.Sub(uc.lastUsed) < maxIdle {
			keep = append(keep, uc)
		} else {
			drop = append(drop, uc)
		}
	}
	clear(u.idle[len(keep):])
	u.idle = keep
	if maxIdle == 0 {
		u.closed = true
	}
	u.mu.Unlock()
	for _, uc := range drop {
		uc.close()
	}
}
