package readiness

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParseRoundTripAndValidate(t *testing.T) {
	c := Check{HTTP: &HTTPGet{Scheme: "HTTPS", Port: 8443, Path: "/ready", Headers: []Header{{Name: "X", Value: "1"}}}, TimeoutSeconds: 2, FailureThreshold: 5}
	got, err := Parse(c.String())
	if err != nil || got.String() != c.String() {
		t.Fatalf("round trip: %v, %v", got, err)
	}
	if got.Timeout().Seconds() != 2 || got.Period().Seconds() != 10 || got.Successes() != 1 || got.Failures() != 5 {
		t.Errorf("defaults and values: timeout %v period %v successes %d failures %d", got.Timeout(), got.Period(), got.Successes(), got.Failures())
	}
	for in, want := range map[string]string{
		`{}`:                                     "exactly one of http and tcp",
		`{"http":{"port":80},"tcp":{"port":80}}`: "exactly one of http and tcp",
		`{"http":{"port":0}}`:                    "port 0 out of range",
		`{"http":{"port":80,"scheme":"FTP"}}`:    `scheme "FTP"`,
		`{"http":{"port":80,"path":"x"}}`:        "must start with /",
		`{"tcp":{"port":80},"periodSeconds":-1}`: "periodSeconds -1",
		`{"exec":["true"]}`:                      "unknown field",
	} {
		if _, err := Parse(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%s) = %v, want an error with %q", in, err, want)
		}
	}
}

func TestRun(t *testing.T) {
	status := http.StatusServiceUnavailable
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/ready" || r.Header.Get("X-Probe") != "1" || r.Host != "app.test" {
			http.Error(w, "wrong request", http.StatusBadRequest)
			return
		}
		w.WriteHeader(status)
	}))
	defer srv.Close()
	_, p, _ := net.SplitHostPort(srv.Listener.Addr().String())
	port, _ := strconv.Atoi(p)
	r := NewRunner(Check{HTTP: &HTTPGet{Port: int32(port), Path: "/ready", Headers: []Header{{Name: "X-Probe", Value: "1"}, {Name: "Host", Value: "app.test"}}}})
	if err := r.Run(context.Background()); err == nil || err.Error() != "answered 503 Service Unavailable" {
		t.Errorf("503: %v", err)
	}
	status = http.StatusFound // a redirect passes, as for the kubelet
	if err := r.Run(context.Background()); err != nil {
		t.Errorf("302: %v", err)
	}
	if err := NewRunner(Check{TCP: &TCPSocket{Port: int32(port)}}).Run(context.Background()); err != nil {
		t.Errorf("tcp to a listening port: %v", err)
	}
	srv.Close()
	if err := NewRunner(Check{TCP: &TCPSocket{Port: int32(port)}}).Run(context.Background()); err == nil {
		t.Error("tcp to a closed port passed")
	}
}

// TestRunEndlessHead: an app answering the check with a head that never
// ends fails it once MaxHeaderBytes are read (Go's default is 10 MB): the
// app gets to write well under 10 MiB before the check hangs up.
func TestRunEndlessHead(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	written := make(chan int, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			written <- 0
			return
		}
		defer c.Close()
		_ = c.(*net.TCPConn).SetWriteBuffer(4 << 10)
		n, _ := c.Write([]byte("HTTP/1.1 200 OK\r\n"))
		pad := []byte("X-Pad: " + strings.Repeat("x", 1000) + "\r\n")
		for {
			m, err := c.Write(pad)
			n += m
			if err != nil {
				written <- n
				return
			}
		}
	}()
	port, _ := strconv.Atoi(strings.TrimPrefix(ln.Addr().String(), "127.0.0.1:"))
	r := NewRunner(Check{HTTP: &HTTPGet{Port: int32(port), Path: "/ready"}, TimeoutSeconds: 5})
	start := time.Now()
	err = r.Run(context.Background())
	took := time.Since(start)
	n := <-written
	// The socket buffers on loopback hold a few MiB beside what the
	// check read.
	if err == nil || took > 3*time.Second || n >= 10<<20 {
		t.Errorf("Run = %v after %s, the app wrote %d bytes; want an error at once, under 10 MiB written", err, took, n)
	}
	t.Logf("%v after %s; the app wrote %.1f MiB", err, took, float64(n)/(1<<20))
}
