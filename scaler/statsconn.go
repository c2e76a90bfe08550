package scaler

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"time"

	"github.com/ebb-dev/ebb/internal/sidecarapi"
)

// statsConn is a kept-alive HTTP/1.1 connection to one sidecar's admin port,
// used by one reader at a time. It speaks just enough HTTP for GET /stats: a
// request prebuilt once and sidecarapi.ReadStatsResponse, a strict reader
// bounded in bytes (fuzzed against net/http), all within one deadline. net/http's
// Transport costs two goroutines, a channel hand-off each way and ~20 KiB
// per connection, which at 5,000 sidecars a second is most of the scaler's
// CPU and memory; this costs a write, a read and 512 bytes. Whatever a pod
// answers, a read costs at most the deadline, the 512-byte buffer and
// sidecarapi.MaxHead + sidecarapi.MaxBody bytes of framing.
type statsConn struct {
	addr string
	req  []byte
	conn net.Conn
	br   *bufio.Reader
}

func newStatsConn(hostport, path string) *statsConn {
	return &statsConn{addr: hostport, req: []byte("GET " + path + " HTTP/1.1\r\nHost: " + hostport + "\r\nUser-Agent: ebb-scaler\r\n\r\n")}
}

// get reads one body into buf and returns its length. Any error closes the
// connection; the next get dials again.
func (c *statsConn) get(ctx context.Context, d *net.Dialer, timeout time.Duration, buf []byte) (int, error) {
	n, keep, err := c.roundTrip(ctx, d, timeout, buf)
	if err != nil || !keep {
		c.close()
	}
	return n, err
}

func (c *statsConn) roundTrip(ctx context.Context, d *net.Dialer, timeout time.Duration, buf []byte) (int, bool, error) {
	deadline := time.Now().Add(timeout)
	if c.conn == nil {
		dctx, cancel := context.WithDeadline(ctx, deadline)
		conn, err := d.DialContext(dctx, "tcp", c.addr)
		cancel()
		if err != nil {
			return 0, false, fmt.Errorf("dial: %w", err)
		}
		c.conn = conn
		if c.br == nil {
			c.br = bufio.NewReaderSize(conn, 512)
		} else {
			c.br.Reset(conn)
		}
	}
	// One deadline for the whole exchange: a pod that answers one byte at
	// a time cannot stretch it.
	if err := c.conn.SetDeadline(deadline); err != nil {
		return 0, false, fmt.Errorf("set deadline: %w", err)
	}
	if _, err := c.conn.Write(c.req); err != nil {
		return 0, false, fmt.Errorf("write request: %w", err)
	}
	return sidecarapi.ReadStatsResponse(c.br, buf)
}

func (c *statsConn) close() {
	if c.conn != nil {
		_ = c.conn.Close()
		c.conn = nil
	}
}
