package main

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gorilla/websocket"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/ebb-dev/ebb/internal/sidecarapi"
)

func TestParseConfig(t *testing.T) {
	env := map[string]string{"LISTEN": ":9999", "DELAY": "5ms", "POD_NAME": "pod-1"}
	got, err := parseConfig([]string{"--startup-delay", "1s", "--listen", ":7777"}, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	want := config{listen: ":7777", startupDelay: time.Second, delay: 5 * time.Millisecond, readyPath: "/healthz", name: "pod-1"}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(config{})); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
	if _, err := parseConfig([]string{"--ready-path", "x"}, func(k string) string { return map[string]string{"DELAY": "soon"}[k] }); err == nil ||
		!strings.Contains(err.Error(), "DELAY") || !strings.Contains(err.Error(), "--ready-path") {
		t.Errorf("bad config error = %v, want both problems", err)
	}
}

func startApp(t *testing.T, cfg config) (string, context.CancelFunc, chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, ln, cfg) }()
	t.Cleanup(cancel)
	return ln.Addr().String(), cancel, done
}

func body(t *testing.T, c *http.Client, url string) (int, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestEndpoints(t *testing.T) {
	addr, _, _ := startApp(t, config{readyPath: "/ready", name: "pod-1"})
	base := "http://" + addr
	if code, b := body(t, http.DefaultClient, base+"/"); code != 200 || b != "hello from pod-1\n" {
		t.Errorf("/: %d %q", code, b)
	}
	if code, _ := body(t, http.DefaultClient, base+"/ready"); code != 200 {
		t.Errorf("/ready: %d", code)
	}
	readyResp, err := http.Get(base + "/ready")
	if err != nil {
		t.Fatal(err)
	}
	readyResp.Body.Close()
	if at, err := time.Parse(time.RFC3339Nano, readyResp.Header.Get("X-App-Started")); err != nil || !at.Equal(started) {
		t.Errorf("/ready says X-App-Started %q (%v), want the process start %s", readyResp.Header.Get("X-App-Started"), err, started.Format(time.RFC3339Nano))
	}
	start := time.Now()
	body(t, http.DefaultClient, base+"/?delay=100ms")
	if took := time.Since(start); took < 100*time.Millisecond {
		t.Errorf("?delay=100ms took %v", took)
	}
	if code, b := body(t, http.DefaultClient, base+"/sse?n=3&interval=10ms"); code != 200 || strings.Count(b, "data: event") != 3 {
		t.Errorf("/sse: %d %q", code, b)
	}
	resp, err := http.Post(base+"/echo", "text/plain", strings.NewReader("echo me"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "echo me" {
		t.Errorf("/echo: %q", b)
	}

	ws, _, err := websocket.DefaultDialer.Dial("ws://"+addr+"/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	ws.WriteMessage(websocket.TextMessage, []byte("ping"))
	if _, m, err := ws.ReadMessage(); err != nil || string(m) != "ping" {
		t.Errorf("/ws echo: %q, %v", m, err)
	}
	ws.Close()

	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	h2 := &http.Client{Transport: &http.Transport{Protocols: &protos}}
	r2, err := h2.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	r2.Body.Close()
	if r2.ProtoMajor != 2 {
		t.Errorf("h2c prior knowledge answered with %s", r2.Proto)
	}

	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), echoTrailerKey, "v1"), 5*time.Second)
	defer cancel()
	var tr metadata.MD
	res, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{Service: "ebb.test"}, grpc.Trailer(&tr))
	if err != nil || res.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health check: %v, %v", res, err)
	}
	if diff := cmp.Diff([]string{"v1"}, tr.Get(echoTrailerKey)); diff != "" {
		t.Errorf("trailer (-want +got):\n%s", diff)
	}
}

func TestGracefulShutdown(t *testing.T) {
	addr, cancel, done := startApp(t, config{readyPath: "/healthz", name: "x"})
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	io.WriteString(conn, "GET /?delay=300ms HTTP/1.1\r\nHost: x\r\n\r\n")
	time.Sleep(50 * time.Millisecond)
	cancel()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("request in flight at shutdown: %v, %v", resp, err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("serve did not return after shutdown")
	}
}

// TestHostileStats: each --hostile-stats mode answers a request head as it
// says, and keeps the connection for the next request; the forged figures
// come in an answer the scaler's reader takes, so it is the figures it
// refuses.
func TestHostileStats(t *testing.T) {
	if _, err := parseConfig([]string{"--hostile-stats", "nope"}, func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), "boot-churn") {
		t.Errorf("unknown mode: error %v, want the modes listed", err)
	}
	for mode, want := range map[string]string{
		"inflight-max":      "ebb1 9223372036854775807 0 1 0\n",
		"inflight-negative": "ebb1 -5 0 1 0\n",
	} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- serveHostile(ctx, ln, hostileModes[mode]) }()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c)
		for range 2 {
			if _, err := io.WriteString(c, "GET /stats HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			// Read as the scaler reads it: a valid answer, whose line
			// is what the scaler then refuses.
			var body [sidecarapi.MaxBody]byte
			n, keep, err := sidecarapi.ReadStatsResponse(br, body[:])
			if err != nil || !keep {
				t.Fatalf("%s: keep-alive %v, %v", mode, keep, err)
			}
			if string(body[:n]) != want {
				t.Errorf("%s: body %q, want %q", mode, body[:n], want)
			}
		}
		c.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s: serveHostile: %v", mode, err)
		}
	}
}
