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

// TestChain: GET /chain on the first app of frontend → api → db answers
// each hop's pod name, in order; when a downstream fails (gone, or not
// answering 200) the app that called it answers 502 naming the downstream
// and why, and so does every app before it.
func TestChain(t *testing.T) {
	db, stopDB, dbDone := startApp(t, config{readyPath: "/healthz", name: "db-1"})
	api, _, _ := startApp(t, config{readyPath: "/healthz", name: "api-1", downstream: "http://" + db})
	frontend, _, _ := startApp(t, config{readyPath: "/healthz", name: "frontend-1", downstream: "http://" + api})
	if code, b := body(t, http.DefaultClient, "http://"+frontend+"/chain"); code != 200 || b != "frontend-1\napi-1\ndb-1\n" {
		t.Errorf("/chain: %d %q, want 200 with every hop", code, b)
	}
	if code, b := body(t, http.DefaultClient, "http://"+db+"/chain"); code != 200 || b != "db-1\n" {
		t.Errorf("/chain at the end of the chain: %d %q", code, b)
	}

	notFound, _, _ := startApp(t, config{readyPath: "/healthz", name: "x-1", downstream: "http://" + db + "/elsewhere"})
	code, b := body(t, http.DefaultClient, "http://"+notFound+"/chain")
	if want := "x-1: downstream http://" + db + "/elsewhere/chain: 404 Not Found: 404 page not found\n"; code != http.StatusBadGateway || b != want {
		t.Errorf("/chain with a downstream answering 404: %d %q, want 502 %q", code, b, want)
	}

	stopDB()
	if err := <-dbDone; err != nil {
		t.Fatal(err)
	}
	code, b = body(t, http.DefaultClient, "http://"+frontend+"/chain")
	if want := "frontend-1: downstream http://" + api + "/chain: 502 Bad Gateway: api-1: downstream http://" + db + "/chain: "; code != http.StatusBadGateway ||
		!strings.HasPrefix(b, want) || !strings.Contains(b, "connection refused") {
		t.Errorf("/chain with db gone: %d %q, want 502 %q… connection refused", code, b, want)
	}

	for _, bad := range []string{"api:80", "ftp://api", "http://"} {
		if _, err := parseConfig([]string{"--downstream", bad}, func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), "--downstream") {
			t.Errorf("--downstream %q: error %v, want one naming the flag", bad, err)
		}
	}
	c, err := parseConfig(nil, func(k string) string { return map[string]string{"DOWNSTREAM": "http://api.shop.svc.cluster.local/"}[k] })
	if err != nil || c.downstream != "http://api.shop.svc.cluster.local" {
		t.Errorf("DOWNSTREAM: %q, %v", c.downstream, err)
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

// inflight reads the app's load figures from /inflight.
func inflight(t *testing.T, base string) (inFlight, most, total string) {
	t.Helper()
	resp, err := http.Get(base + inFlightPath)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	h := resp.Header
	if want := "in-flight " + h.Get("X-App-In-Flight") + "\nmax-in-flight " + h.Get("X-App-Max-In-Flight") + "\nrequests " + h.Get("X-App-Requests") + "\n"; string(b) != want {
		t.Errorf("%s body %q, want %q (its headers)", inFlightPath, b, want)
	}
	return h.Get("X-App-In-Flight"), h.Get("X-App-Max-In-Flight"), h.Get("X-App-Requests")
}

// TestLoadMeter: three overlapping requests are in flight at once, each
// response says how many were in flight when it arrived and the most at
// once; the ready path and /inflight itself are not counted.
func TestLoadMeter(t *testing.T) {
	if c, err := parseConfig(nil, func(k string) string { return map[string]string{"IN_FLIGHT_HEADERS": "true"}[k] }); err != nil || !c.inFlightHeaders {
		t.Errorf("IN_FLIGHT_HEADERS=true: in-flight headers %v, %v", c.inFlightHeaders, err)
	}
	plain, _, _ := startApp(t, config{readyPath: "/healthz", name: "x"})
	resp, err := http.Get("http://" + plain + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get("X-App-In-Flight") != "" || resp.Header.Get("X-App-Max-In-Flight") != "" {
		t.Errorf("without --in-flight-headers a response says %v", resp.Header)
	}
	addr, _, _ := startApp(t, config{readyPath: "/healthz", name: "x", inFlightHeaders: true})
	base := "http://" + addr
	if code, _ := body(t, http.DefaultClient, base+"/healthz"); code != 200 {
		t.Fatalf("/healthz: %d", code)
	}
	if diff := cmp.Diff([3]string{"0", "0", "0"}, func() [3]string { a, b, c := inflight(t, base); return [3]string{a, b, c} }()); diff != "" {
		t.Errorf("before any request, the ready path's not counted (-want +got):\n%s", diff)
	}
	type answer struct {
		status          int
		arrived, atMost string
	}
	answers := make(chan answer, 3)
	for range 3 {
		go func() {
			resp, err := http.Get(base + "/?delay=1s")
			if err != nil {
				answers <- answer{}
				return
			}
			resp.Body.Close()
			answers <- answer{resp.StatusCode, resp.Header.Get("X-App-In-Flight"), resp.Header.Get("X-App-Max-In-Flight")}
		}()
	}
	deadline := time.Now().Add(900 * time.Millisecond)
	for {
		if in, _, _ := inflight(t, base); in == "3" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("three requests of 1 s sent at once never showed 3 in flight")
		}
		time.Sleep(10 * time.Millisecond)
	}
	arrived := map[string]int{}
	for range 3 {
		a := <-answers
		if a.status != 200 || a.atMost != "3" {
			t.Errorf("answer %+v: want 200 with X-App-Max-In-Flight 3", a)
		}
		arrived[a.arrived]++
	}
	if diff := cmp.Diff(map[string]int{"1": 1, "2": 1, "3": 1}, arrived); diff != "" {
		t.Errorf("X-App-In-Flight on arrival (-want +got):\n%s", diff)
	}
	resp, err = http.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := [2]string{resp.Header.Get("X-App-In-Flight"), resp.Header.Get("X-App-Max-In-Flight")}; got != [2]string{"1", "3"} {
		t.Errorf("a lone request after them says in flight, most %v, want [1 3]", got)
	}
	if in, most, total := inflight(t, base); in != "0" || most != "3" || total != "4" {
		t.Errorf("%s after 4 requests: in flight %s, most %s, total %s; want 0, 3, 4", inFlightPath, in, most, total)
	}
}

// TestSilentWebSocket: /ws?silent=1 accepts the upgrade and then answers
// nothing, not even a ping; it is in flight until the client closes it.
func TestSilentWebSocket(t *testing.T) {
	addr, _, _ := startApp(t, config{readyPath: "/healthz", name: "x"})
	base := "http://" + addr
	ws, _, err := websocket.DefaultDialer.Dial("ws://"+addr+"/ws?silent=1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ws.WriteMessage(websocket.TextMessage, []byte("anyone?")); err != nil {
		t.Fatal(err)
	}
	if err := ws.WriteControl(websocket.PingMessage, []byte("ping"), time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	pong := make(chan struct{}, 1)
	ws.SetPongHandler(func(string) error { pong <- struct{}{}; return nil })
	ws.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	if mt, m, err := ws.ReadMessage(); err == nil {
		t.Errorf("silent WebSocket sent a message (type %d): %q", mt, m)
	} else if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		t.Errorf("silent WebSocket: read error %v, want a timeout (nothing sent, not closed)", err)
	}
	select {
	case <-pong:
		t.Error("silent WebSocket answered a ping")
	default:
	}
	if in, _, _ := inflight(t, base); in != "1" {
		t.Errorf("in flight with the silent WebSocket open: %s, want 1", in)
	}
	ws.Close()
	deadline := time.Now().Add(2 * time.Second)
	for {
		in, _, _ := inflight(t, base)
		if in == "0" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("in flight 2 s after the client closed the silent WebSocket: %s, want 0 (the app saw the close)", in)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The echo mode is unchanged.
	echo, _, err := websocket.DefaultDialer.Dial("ws://"+addr+"/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	echo.WriteMessage(websocket.TextMessage, []byte("hi"))
	echo.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, m, err := echo.ReadMessage(); err != nil || string(m) != "hi" {
		t.Errorf("/ws echo: %q, %v", m, err)
	}
}
