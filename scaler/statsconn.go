package scaler

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

// statsConn is a kept-alive HTTP/1.1 connection to one sidecar's admin port,
// used by one tick worker at a time. It speaks just enough HTTP for GET
// /stats: a request prebuilt once, a status line, Content-Length or chunked
// bodies. net/http's Transport costs two goroutines, a channel hand-off each
// way and ~20 KiB per connection, which at 5,000 sidecars a second is most of
// the scaler's CPU and memory; this costs a write, a read and 512 bytes.
type statsConn struct {
	addr string
	req  []byte
	conn net.Conn
	br   *bufio.Reader
}

func newStatsConn(hostport, path string) *statsConn {
	return &statsConn{addr: hostport, req: []byte("GET " + path + " HTTP/1.1\r\nHost: " + hostport + "\r\nUser-Agent: ebb-scaler\r\n\r\n")}
}

var errStatus = errors.New("stats did not answer 200")

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
	if err := c.conn.SetDeadline(deadline); err != nil {
		return 0, false, fmt.Errorf("set deadline: %w", err)
	}
	if _, err := c.conn.Write(c.req); err != nil {
		return 0, false, fmt.Errorf("write request: %w", err)
	}
	line, err := c.br.ReadSlice('\n')
	if err != nil {
		return 0, false, fmt.Errorf("read status: %w", err)
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || string(line[8:13]) != " 200 " && string(bytes.TrimRight(line[8:], "\r\n")) != " 200" {
		return 0, false, fmt.Errorf("%w: %q", errStatus, bytes.TrimSpace(line))
	}
	length, chunked, keep := -1, false, line[7] == '1'
	for {
		line, err := c.br.ReadSlice('\n')
		if err != nil {
			return 0, false, fmt.Errorf("read header: %w", err)
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return 0, false, fmt.Errorf("malformed header %q", line)
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if length, err = strconv.Atoi(string(value)); err != nil || length < 0 {
				return 0, false, fmt.Errorf("malformed Content-Length %q", value)
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			chunked = bytes.EqualFold(value, []byte("chunked"))
		case bytes.EqualFold(name, []byte("Connection")):
			if bytes.EqualFold(value, []byte("close")) {
				keep = false
			}
		}
	}
	switch {
	case chunked:
		n, err := c.readChunked(buf)
		return n, keep, err
	case length < 0:
		return 0, false, errors.New("stats answer has no Content-Length")
	case length > len(buf):
		return 0, false, errTooLong
	default:
		if _, err := io.ReadFull(c.br, buf[:length]); err != nil {
			return 0, false, fmt.Errorf("read body: %w", err)
		}
		return length, keep, nil
	}
}

func (c *statsConn) readChunked(buf []byte) (int, error) {
	n := 0
	for {
		line, err := c.br.ReadSlice('\n')
		if err != nil {
			return 0, fmt.Errorf("read chunk size: %w", err)
		}
		sizeHex, _, _ := bytes.Cut(bytes.TrimRight(line, "\r\n"), []byte(";"))
		size, err := strconv.ParseUint(string(bytes.TrimSpace(sizeHex)), 16, 32)
		if err != nil {
			return 0, fmt.Errorf("malformed chunk size %q", line)
		}
		if size == 0 {
			for { // trailers, then the empty line
				line, err := c.br.ReadSlice('\n')
				if err != nil {
					return 0, fmt.Errorf("read trailer: %w", err)
				}
				if len(bytes.TrimRight(line, "\r\n")) == 0 {
					return n, nil
				}
			}
		}
		if n+int(size) > len(buf) {
			return 0, errTooLong
		}
		if _, err := io.ReadFull(c.br, buf[n:n+int(size)]); err != nil {
			return 0, fmt.Errorf("read chunk: %w", err)
		}
		n += int(size)
		if _, err := c.br.Discard(2); err != nil {
			return 0, fmt.Errorf("read chunk end: %w", err)
		}
	}
}

func (c *statsConn) close() {
	if c.conn != nil {
		_ = c.conn.Close()
		c.conn = nil
	}
}
