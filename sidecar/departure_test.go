package sidecar

import (
	"bufio"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	h1 "github.com/ebb-dev/ebb/internal/http1"
	"github.com/ebb-dev/ebb/internal/testwait"
)

// silentApp reads each connection's first request head and then, for an
// upgrade, answers 101; either way it never answers again and ignores the
// client's FIN, until the test ends.
func silentApp(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() {
		close(done)
		ln.Close()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				line, err := br.ReadString('\n')
				if err != nil || skipHead(br) != nil {
					return
				}
				if strings.HasPrefix(line, "GET /ws ") {
					io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: x\r\n\r\n")
				}
				io.Copy(io.Discard, br)
				<-done
			}()
		}
	}()
	return ln.Addr().String()
}

// TestClientDepartureLeavesTheCount: the pod's in-flight figure, as the
// scaler reads it, drops when a client leaves an app that does not notice:
// behind a pipelined request within a few client checks, and from a tunnel
// once the app has been silent for the engine's half-close timeout
// (issue 34, found 1 and 3).
func TestClientDepartureLeavesTheCount(t *testing.T) {
	tests := []struct {
		name, send string
		within     time.Duration
	}{
		{"pipelined request", "GET /hang HTTP/1.1\r\nHost: a\r\n\r\nGET /next HTTP/1.1\r\nHost: a\r\n\r\n", time.Second},
		{"tunnel", "GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: x\r\n\r\n", h1.DefaultHalfCloseTimeout + time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := startSidecar(t, testOptions(silentApp(t)))
			c, err := net.Dial("tcp", r.addr)
			if err != nil {
				t.Fatal(err)
			}
			io.WriteString(c, tt.send)
			testwait.For(t, 2*time.Second, "request in flight", func() bool { return readStats(t, r).InFlight == 1 })
			if strings.Contains(tt.send, "Upgrade") {
				c.SetReadDeadline(time.Now().Add(2 * time.Second))
				if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
					t.Fatalf("no 101: %v", err)
				}
			}
			c.Close()
			start := time.Now()
			testwait.For(t, tt.within+time.Second, "request out of flight", func() bool { return readStats(t, r).InFlight == 0 })
			if took := time.Since(start); took > tt.within {
				t.Errorf("out of flight after %v, want within %v", took, tt.within)
			}
		})
	}
}
