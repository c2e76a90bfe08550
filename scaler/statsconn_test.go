package scaler

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ebb-dev/ebb/internal/sidecarapi"
)

func TestStatsConn(t *testing.T) {
	for name, tc := range map[string]struct {
		handler http.HandlerFunc
		want    string
		err     string
	}{
		"content length": {func(w http.ResponseWriter, _ *http.Request) { typed(w); _, _ = w.Write([]byte("ebb1 1 2 3 4\n")) }, "ebb1 1 2 3 4\n", ""},
		"chunked": {func(w http.ResponseWriter, _ *http.Request) {
			typed(w)
			_, _ = w.Write([]byte("ebb1 1 "))
			w.(http.Flusher).Flush()
			_, _ = w.Write([]byte("2 3 4\n"))
		}, "ebb1 1 2 3 4\n", ""},
		"connection close": {func(w http.ResponseWriter, _ *http.Request) {
			typed(w)
			w.Header().Set("Connection", "close")
			_, _ = w.Write([]byte("ebb1 0 0 1 0\n"))
		}, "ebb1 0 0 1 0\n", ""},
		"another version": {func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; version=ebb2")
			_, _ = w.Write([]byte("ebb2 0 0 1 0 0\n"))
		}, "", `refused (format): Content-Type "text/plain; version=ebb2", want one "text/plain; version=ebb1"`},
		"not 200": {func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "draining", http.StatusServiceUnavailable) }, "", `refused (status): status "503"`},
		"too long": {func(w http.ResponseWriter, _ *http.Request) {
			typed(w)
			_, _ = w.Write([]byte(strings.Repeat("x", 1000)))
		}, "", "refused (too_long): Content-Length 1000 above 256"},
		"too slow": {func(w http.ResponseWriter, _ *http.Request) { time.Sleep(300 * time.Millisecond) }, "", "i/o timeout"},
	} {
		t.Run(name, func(t *testing.T) {
			var conns atomic.Int32
			srv := httptest.NewUnstartedServer(tc.handler)
			srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
				if s == http.StateNew {
					conns.Add(1)
				}
			}
			srv.Start()
			defer srv.Close()
			c := newStatsConn(srv.Listener.Addr().String(), "/stats")
			defer c.close()
			var buf [maxStatsBody]byte
			d := &net.Dialer{}
			for range 3 {
				n, err := c.get(context.Background(), d, 100*time.Millisecond, buf[:])
				if tc.err != "" {
					if err == nil || !strings.Contains(err.Error(), tc.err) {
						t.Fatalf("get = %q, %v; want error %q", buf[:n], err, tc.err)
					}
					continue
				}
				if err != nil || string(buf[:n]) != tc.want {
					t.Fatalf("get = %q, %v; want %q", buf[:n], err, tc.want)
				}
			}
			wantConns := int32(1)
			if name == "connection close" || tc.err != "" {
				wantConns = 3 // the server or an error closed each one
			}
			if got := conns.Load(); got != wantConns {
				t.Errorf("%d connections for 3 reads, want %d", got, wantConns)
			}
		})
	}
}

func typed(w http.ResponseWriter) { w.Header().Set("Content-Type", sidecarapi.StatsContentType) }

func TestStatsConnDialFails(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	var buf [maxStatsBody]byte
	_, err = newStatsConn(addr, "/stats").get(context.Background(), &net.Dialer{}, 100*time.Millisecond, buf[:])
	var op *net.OpError
	if !errors.As(err, &op) {
		t.Errorf("get from a closed port: %v, want a dial error", err)
	}
}
