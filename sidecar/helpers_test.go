package sidecar

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/ebb-dev/ebb/internal/tcptest"
	"github.com/ebb-dev/ebb/internal/tracing"
)

// testOptions are options for a sidecar on loopback ports chosen by the OS.
func testOptions(upstream string) Options {
	o := DefaultOptions()
	o.Listen = "127.0.0.1:0"
	o.AdminListen = "127.0.0.1:0"
	o.Upstream = upstream
	o.DrainTimeout = 5 * time.Second
	return o
}

// running is a sidecar started by startSidecar.
type running struct {
	s      *server
	addr   string // client address
	admin  string // admin address
	cancel context.CancelFunc
	done   chan error
}

// startSidecar runs a sidecar until the test ends.
func startSidecar(t testing.TB, o Options) *running {
	t.Helper()
	if err := o.Validate(); err != nil {
		t.Fatalf("options: %v", err)
	}
	tp := tracing.New(o.Tracing, "ebb-sidecar")
	s, err := start(o, logr.Discard(), tp.Tracer)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{s: s, addr: s.ln.Addr().String(), admin: s.adminLn.Addr().String(), cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- s.run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(10 * time.Second):
			t.Errorf("sidecar did not stop within 10s")
		}
	})
	return r
}

// rawUpstream is an HTTP/1.1 server that answers every request head with
// resp, allocation-free, so that benchmarks measure the proxy alone.
func rawUpstream(t testing.TB, resp string) string {
	t.Helper()
	return tcptest.Serve(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		out := []byte(resp)
		for {
			if err := skipHead(br); err != nil {
				return
			}
			if _, err := c.Write(out); err != nil {
				return
			}
		}
	})
}

// skipHead reads one head without a body.
func skipHead(br *bufio.Reader) error {
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return err
		}
		if len(bytes.TrimRight(line, "\r\n")) == 0 {
			return nil
		}
	}
}

// readRaw reads one response with a Content-Length body from br, without
// allocating, and returns the status code.
func readRaw(br *bufio.Reader) (int, error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		return 0, err
	}
	code := atoi(line[9:12])
	cl := 0
	for {
		line, err = br.ReadSlice('\n')
		if err != nil {
			return 0, err
		}
		l := bytes.TrimRight(line, "\r\n")
		if len(l) == 0 {
			break
		}
		if len(l) > 16 && bytes.EqualFold(l[:15], []byte("content-length:")) {
			cl = atoi(bytes.TrimLeft(l[15:], " \t"))
		}
	}
	_, err = br.Discard(cl)
	return code, err
}

var _ = io.EOF

// atoi parses the leading decimal digits of b, without allocating.
func atoi(b []byte) int {
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			break
		}
		n = n*10 + int(c-'0')
	}
	return n
}
