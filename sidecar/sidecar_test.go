package sidecar

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gorilla/websocket"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ebb-dev/ebb/internal/readiness"
	"github.com/ebb-dev/ebb/internal/sidecarapi"
	"github.com/ebb-dev/ebb/internal/testwait"
)

func get(t *testing.T, c *http.Client, url string, hdr ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: read body: %v", url, err)
	}
	return resp.StatusCode, string(b)
}

// readStats reads the sidecar's stats as the scaler does: its request on a
// raw connection and its strict reader, which takes only the one
// Content-Type and stats line of this version.
func readStats(t *testing.T, r *running) sidecarapi.Snapshot {
	t.Helper()
	c, err := net.DialTimeout("tcp", r.admin, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "GET "+sidecarapi.StatsPath+" HTTP/1.1\r\nHost: "+r.admin+"\r\nUser-Agent: ebb-scaler\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	var body [sidecarapi.MaxBody]byte
	n, keep, err := sidecarapi.ReadStatsResponse(bufio.NewReaderSize(c, 512), body[:])
	if err != nil || !keep {
		t.Fatalf("the sidecar's stats answer, read as the scaler reads it: keep-alive %v, %v", keep, err)
	}
	s, err := sidecarapi.ParseSnapshot(body[:n])
	if err != nil {
		t.Fatalf("stats body %q: %v", body[:n], err)
	}
	return s
}

func TestParseOptions(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	def := DefaultOptions()
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want func(*Options)
	}{
		{name: "defaults", want: func(*Options) {}},
		{name: "env", env: map[string]string{"EBB_LISTEN": ":9000", "EBB_UPSTREAM": "127.0.0.1:3000", "EBB_ADMIN_LISTEN": ":9001",
			"EBB_DRAIN_TIMEOUT": "5s", "EBB_DRAIN_DELAY": "2s", "EBB_COUNTING": "false", "POD_NAME": "p", "POD_NAMESPACE": "ns", "POD_IP": "10.0.0.1"},
			want: func(o *Options) {
				o.Listen, o.Upstream, o.AdminListen, o.DrainTimeout, o.Counting = ":9000", "127.0.0.1:3000", ":9001", 5*time.Second, false
				o.DrainDelay = 2 * time.Second
				o.PodName, o.PodNamespace, o.PodIP = "p", "ns", "10.0.0.1"
			}},
		{name: "flag beats env", args: []string{"--upstream", "127.0.0.1:4000", "--drain-timeout=1m", "--max-header-bytes", "8192"},
			env:  map[string]string{"EBB_UPSTREAM": "127.0.0.1:3000", "EBB_DRAIN_TIMEOUT": "5s"},
			want: func(o *Options) { o.Upstream, o.DrainTimeout, o.MaxHeaderBytes = "127.0.0.1:4000", time.Minute, 8192 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseOptions(tt.args, env(tt.env))
			if err != nil {
				t.Fatal(err)
			}
			want := def
			tt.want(&want)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("options (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseOptionsReportsEveryProblem(t *testing.T) {
	_, err := ParseOptions([]string{"--upstream", "nohost", "--listen", ":1", "--admin-listen", ":1", "--log-level", "loud"},
		func(k string) string {
			return map[string]string{"EBB_DRAIN_TIMEOUT": "soon", "EBB_MAX_HEADER_BYTES": "12"}[k]
		})
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"EBB_DRAIN_TIMEOUT", "--upstream", "--listen and --admin-listen", "--max-header-bytes", "--log-level"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %s:\n%v", want, err)
		}
	}
}

func TestProxiesHTTP1KeepAlive(t *testing.T) {
	app := startTestApp(t)
	r := startSidecar(t, testOptions(app.addr))
	c := &http.Client{}
	reused := 0
	for i := range 5 {
		req, _ := http.NewRequest("GET", "http://"+r.addr+"/", nil)
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			GotConn: func(ci httptrace.GotConnInfo) {
				if ci.Reused {
					reused++
				}
			}}))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "hello HTTP/1.1\n" {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, b)
		}
	}
	if reused != 4 {
		t.Errorf("client connection reused %d times, want 4", reused)
	}
	pooled := func() int {
		return r.s.p.up.Idle()
	}
	time.Sleep(20 * time.Millisecond) // the connection goes back to the pool after the response
	if got := pooled(); got != 1 {
		t.Errorf("%d pooled app connections after sequential requests, want 1", got)
	}
}

func TestForwardsHeaders(t *testing.T) {
	app := startTestApp(t)
	r := startSidecar(t, testOptions(app.addr))
	conn, err := net.Dial("tcp", r.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	io.WriteString(conn, "GET /headers HTTP/1.1\r\nHost: example.com\r\nConnection: keep-alive, X-Hop\r\nX-Hop: a\r\n"+
		"Keep-Alive: timeout=5\r\nX-Forwarded-For: 10.1.1.1\r\nX-Forwarded-For: 10.2.2.2\r\nX-Custom: kept\r\nProxy-Connection: x\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	want := "X-Custom: kept\nX-Forwarded-For: 10.1.1.1, 10.2.2.2, 127.0.0.1\n"
	if diff := cmp.Diff(want, string(b)); diff != "" {
		t.Errorf("headers the app saw (-want +got):\n%s", diff)
	}
}

func TestCountsUnderConcurrency(t *testing.T) {
	app := startTestApp(t)
	r := startSidecar(t, testOptions(app.addr))
	const blocked, workers, each = 7, 16, 50
	var wg sync.WaitGroup
	errs := make(chan error, blocked+workers)
	for range blocked {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Get("http://" + r.addr + "/block")
			if err != nil {
				errs <- err
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}()
	}
	for range blocked {
		<-app.started
	}
	// Many requests much shorter than any scrape: only the total sees them.
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &http.Client{}
			for range each {
				resp, err := c.Get("http://" + r.addr + "/")
				if err != nil {
					errs <- err
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	// The last short request may still be on its way out when the total
	// is reached.
	testwait.For(t, 5*time.Second, "short requests", func() bool {
		s := readStats(t, r)
		return s.Total == blocked+workers*each && s.InFlight == blocked
	})
	close(app.release)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	testwait.For(t, 5*time.Second, "nothing in flight", func() bool { return readStats(t, r).InFlight == 0 })
	s := readStats(t, r)
	if diff := cmp.Diff(sidecarapi.Snapshot{InFlight: 0, Total: blocked + workers*each, BootID: s.BootID}, s); diff != "" {
		t.Errorf("stats (-want +got):\n%s", diff)
	}
	if s.BootID == 0 {
		t.Error("boot ID is 0")
	}
}

// TestKubeProbeUserAgentIsCounted: no header a client controls takes a
// request out of the count. A request that says "User-Agent:
// kube-probe/1.36" is in flight while the app holds it, on HTTP/1.1 and on
// h2c (it was not counted at all: a WebSocket opened that way was invisible
// to the scaler). Kubelet probes stay uncounted because the webhook points
// them at the app's own port (webhook/inject).
func TestKubeProbeUserAgentIsCounted(t *testing.T) {
	app := startTestApp(t)
	r := startSidecar(t, testOptions(app.addr))
	conn, err := net.Dial("tcp", r.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	io.WriteString(conn, "GET /block HTTP/1.1\r\nHost: a\r\nUser-Agent: kube-probe/1.36\r\n\r\n")
	<-app.started
	if s := readStats(t, r); s.InFlight != 1 || s.Total != 1 {
		t.Errorf("HTTP/1.1: in flight %d, total %d while the app holds a kube-probe request, want 1 and 1", s.InFlight, s.Total)
	}

	_, fr := h2cHandshake(t, r.addr)
	writeHeaders(t, fr, 1, true, ":method", "GET", ":scheme", "http", ":authority", "a", ":path", "/block", "user-agent", "kube-probe/1.36")
	<-app.started
	if s := readStats(t, r); s.InFlight != 2 || s.Total != 2 {
		t.Errorf("h2c: in flight %d, total %d while the app holds both kube-probe requests, want 2 and 2", s.InFlight, s.Total)
	}
}

func TestCountingOff(t *testing.T) {
	app := startTestApp(t)
	o := testOptions(app.addr)
	o.Counting = false
	r := startSidecar(t, o)
	get(t, http.DefaultClient, "http://"+r.addr+"/")
	if got := readStats(t, r).Total; got != 0 {
		t.Errorf("total = %d with counting off", got)
	}
}

func TestMetrics(t *testing.T) {
	app := startTestApp(t)
	r := startSidecar(t, testOptions(app.addr))
	get(t, http.DefaultClient, "http://"+r.addr+"/")
	// The gauge drops just after the client has the whole response.
	testwait.For(t, 5*time.Second, "nothing in flight", func() bool { return readStats(t, r).InFlight == 0 })
	_, body := get(t, http.DefaultClient, "http://"+r.admin+"/metrics")
	for _, want := range []string{"ebb_sidecar_requests_in_flight 0\n", "ebb_sidecar_requests_total 1\n", "ebb_sidecar_upstream_errors_total 0\n"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func TestWebSocketEchoCountsWhileOpen(t *testing.T) {
	app := startTestApp(t)
	r := startSidecar(t, testOptions(app.addr))
	ws, _, err := websocket.DefaultDialer.Dial("ws://"+r.addr+"/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		msg := fmt.Sprintf("message %d %s", i, strings.Repeat("y", i*20000))
		if err := ws.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		_, got, err := ws.ReadMessage()
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != msg {
			t.Fatalf("echo %d: got %d bytes, want %d", i, len(got), len(msg))
		}
	}
	time.Sleep(20 * time.Millisecond)
	if s := readStats(t, r); s.InFlight != 1 || s.Total != 1 {
		t.Errorf("while the WebSocket is open: %+v, want 1 in flight, total 1", s)
	}
	ws.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
	ws.Close()
	testwait.For(t, 5*time.Second, "WebSocket no longer in flight", func() bool { return readStats(t, r).InFlight == 0 })
}

func TestSSEArrivesIncrementally(t *testing.T) {
	app := startTestApp(t)
	r := startSidecar(t, testOptions(app.addr))
	start := time.Now()
	resp, err := http.Get("http://" + r.addr + "/sse?n=3&interval=300ms")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	var arrivals []time.Duration
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			break
		}
		if strings.HasPrefix(line, "data: ") {
			arrivals = append(arrivals, time.Since(start))
		}
	}
	if len(arrivals) != 3 {
		t.Fatalf("got %d events, want 3", len(arrivals))
	}
	if arrivals[0] > 250*time.Millisecond || arrivals[1] > 550*time.Millisecond {
		t.Errorf("events arrived at %v: not flushed as they came (300ms apart)", arrivals)
	}
}

func TestEchoStreamsBothWays(t *testing.T) {
	app := startTestApp(t)
	r := startSidecar(t, testOptions(app.addr))
	pr, pw := io.Pipe()
	req, _ := http.NewRequest("POST", "http://"+r.addr+"/echo", pr)
	respc := make(chan *http.Response, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			close(respc)
			return
		}
		respc <- resp
	}()
	// Each piece must come back before the next is sent: neither body is
	// buffered whole.
	pw.Write([]byte("piece 0\n"))
	resp := <-respc
	if resp == nil {
		t.FailNow()
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	for i := range 3 {
		if i > 0 {
			fmt.Fprintf(pw, "piece %d\n", i)
		}
		line, err := br.ReadString('\n')
		if err != nil || line != fmt.Sprintf("piece %d\n", i) {
			t.Fatalf("echo %d: %q, %v", i, line, err)
		}
	}
	pw.Close()
	if rest, _ := io.ReadAll(br); len(rest) != 0 {
		t.Errorf("unexpected trailing echo %q", rest)
	}
}

func TestLargeBodiesBothWays(t *testing.T) {
	app := startTestApp(t)
	r := startSidecar(t, testOptions(app.addr))
	body := bytes.Repeat([]byte("0123456789abcdef"), 4<<20/16+7)
	resp, err := http.Post("http://"+r.addr+"/echo", "application/octet-stream", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if sha256.Sum256(got) != sha256.Sum256(body) {
		t.Errorf("echo of %d bytes came back as %d different bytes", len(body), len(got))
	}
	code, big := get(t, http.DefaultClient, "http://"+r.addr+"/big?n=3000001")
	if code != 200 || len(big) != 3000001 {
		t.Errorf("/big: %d, %d bytes", code, len(big))
	}
}

func TestH2CAndGRPCTrailers(t *testing.T) {
	app := startTestApp(t)
	r := startSidecar(t, testOptions(app.addr))

	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	h2 := &http.Client{Transport: &http.Transport{Protocols: &protos}}
	if code, body := get(t, h2, "http://"+r.addr+"/"); code != 200 || body != "hello HTTP/2.0\n" {
		t.Errorf("h2c GET: %d %q, want the app to see HTTP/2.0", code, body)
	}

	cc, err := grpc.NewClient(r.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	hc := healthpb.NewHealthClient(cc)
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "ebb-echo", "through the sidecar"), 5*time.Second)
	defer cancel()
	var trailer metadata.MD
	res, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Trailer(&trailer))
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	if res.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("status %v", res.Status)
	}
	if diff := cmp.Diff([]string{"through the sidecar"}, trailer.Get("ebb-echo")); diff != "" {
		t.Errorf("trailer (-want +got):\n%s", diff)
	}
	_, err = hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "nope"})
	if status.Code(err) != codes.NotFound {
		t.Errorf("Check(nope) = %v, want NotFound (sent in trailers)", err)
	}
	if got := readStats(t, r).Total; got != 3 {
		t.Errorf("total = %d after 3 h2c requests", got)
	}
}

// rawExchange sends raw bytes and returns the first response line and
// whether the sidecar closed the connection afterwards.
func rawExchange(t *testing.T, addr, raw string) (string, bool) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(conn, raw)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return "no response: " + err.Error(), true
	}
	io.ReadAll(resp.Body)
	_, err = br.ReadByte()
	return resp.Status, errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)
}

func TestBadInput(t *testing.T) {
	app := startTestApp(t)
	o := testOptions(app.addr)
	o.MaxHeaderBytes = 4096
	r := startSidecar(t, o)
	// The engine's answers are tested in internal/http1; here: refused
	// requests are answered by ebb-sidecar and never counted.
	tests := []struct{ name, raw, want string }{
		{"oversized headers", "GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 5000) + "\r\n\r\n", "431 Request Header Fields Too Large"},
		{"missing host", "GET / HTTP/1.1\r\n\r\n", "400 Bad Request"},
		{"smuggling CL+TE", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "400 Bad Request"},
		{"CONNECT", "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", "405 Method Not Allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, closed := rawExchange(t, r.addr, tt.raw)
			if got != tt.want || !closed {
				t.Errorf("got %q (closed %v), want %q and the connection closed", got, closed, tt.want)
			}
		})
	}
	if code, _ := get(t, http.DefaultClient, "http://"+r.addr+"/"); code != 200 {
		t.Errorf("after bad input: %d", code)
	}
	if got := readStats(t, r).Total; got != 1 {
		t.Errorf("total = %d: rejected requests must not count", got)
	}
}

func TestAppDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	r := startSidecar(t, testOptions(addr))
	code, body := get(t, http.DefaultClient, "http://"+r.addr+"/")
	if code != 502 || !strings.Contains(body, "the app is not answering on its port ("+addr+")") {
		t.Errorf("app down: %d %q", code, body)
	}
	if code, _ := get(t, http.DefaultClient, "http://"+r.admin+sidecarapi.ReadyPath); code != 503 {
		t.Errorf("/ready with the app down = %d, want 503", code)
	}
	// The app comes up on its port: ready, and requests go through.
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("port %s taken meanwhile: %v", addr, err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "up\n") })}
	go srv.Serve(ln)
	defer srv.Close()
	if code, _ := get(t, http.DefaultClient, "http://"+r.admin+sidecarapi.ReadyPath); code != 200 {
		t.Errorf("/ready with the app up = %d, want 200", code)
	}
	if code, body := get(t, http.DefaultClient, "http://"+r.addr+"/"); code != 200 || body != "up\n" {
		t.Errorf("app up: %d %q", code, body)
	}
}

func TestDrain(t *testing.T) {
	app := startTestApp(t)
	r := startSidecar(t, testOptions(app.addr))
	if code, _ := get(t, http.DefaultClient, "http://"+r.admin+sidecarapi.ReadyPath); code != 200 {
		t.Fatalf("/ready = %d before drain", code)
	}
	slow := make(chan string, 1)
	go func() {
		resp, err := http.Get("http://" + r.addr + "/slow?d=700ms")
		if err != nil {
			slow <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		slow <- fmt.Sprintf("%d %s", resp.StatusCode, b)
	}()
	testwait.For(t, 5*time.Second, "slow request in flight", func() bool { return readStats(t, r).InFlight == 1 })
	start := time.Now()
	r.cancel() // what SIGTERM does in ebb-sidecar
	testwait.For(t, 5*time.Second, "not ready", func() bool {
		code, _ := get(t, http.DefaultClient, "http://"+r.admin+sidecarapi.ReadyPath)
		return code == 503
	})
	// A request that still arrives during the drain is served, on a new
	// connection, and told to close it.
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: false}}).Get("http://" + r.addr + "/")
	if err != nil {
		t.Fatalf("request during drain: %v", err)
	}
	io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !resp.Close {
		t.Errorf("request during drain: %d, Connection: close %v", resp.StatusCode, resp.Close)
	}
	if got := <-slow; got != "200 slow done\n" {
		t.Errorf("in-flight request during drain: %q", got)
	}
	if err := <-r.done; err != nil {
		t.Errorf("Run: %v", err)
	}
	r.done <- nil // for the cleanup
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("drain took %v with nothing left in flight", took)
	}
	if _, err := net.DialTimeout("tcp", r.addr, time.Second); err == nil {
		t.Error("still accepting after the drain")
	}
}

// TestWaitForDrain is the preStop hook the webhook gives the app container:
// the sidecar stays ready and keeps serving (telling keep-alive clients to
// close), and answers only once no request has arrived for the drain delay
// and nothing is in flight.
func TestWaitForDrain(t *testing.T) {
	app := startTestApp(t)
	o := testOptions(app.addr)
	o.DrainDelay = 400 * time.Millisecond
	r := startSidecar(t, o)
	type result struct {
		code int
		body string
		at   time.Time
	}
	start := time.Now()
	done := make(chan result, 1)
	go func() {
		code, body := get(t, http.DefaultClient, "http://"+r.admin+sidecarapi.WaitForDrainPath)
		done <- result{code, body, time.Now()}
	}()
	// Requests keep arriving for 1 s, one every 100 ms (less than the
	// delay): the wait must outlast them, and each is served and closed.
	var last time.Time
	for range 10 {
		time.Sleep(100 * time.Millisecond)
		resp, err := http.Get("http://" + r.addr + "/")
		if err != nil {
			t.Fatalf("request during the preStop wait: %v", err)
		}
		io.ReadAll(resp.Body)
		resp.Body.Close()
		last = time.Now()
		if resp.StatusCode != 200 || !resp.Close {
			t.Errorf("request during the preStop wait: %d, Connection: close %v", resp.StatusCode, resp.Close)
		}
		if code, _ := get(t, http.DefaultClient, "http://"+r.admin+sidecarapi.ReadyPath); code != 200 {
			t.Errorf("/ready = %d during the preStop wait, want 200 (still serving)", code)
		}
		select {
		case res := <-done:
			t.Fatalf("/wait-for-drain answered %d after %v while requests still arrived", res.code, res.at.Sub(start))
		default:
		}
	}
	res := <-done
	if res.code != 200 || res.body != "drained\n" {
		t.Errorf("/wait-for-drain = %d %q", res.code, res.body)
	}
	if quiet := res.at.Sub(last); quiet < o.DrainDelay || quiet > o.DrainDelay+time.Second {
		t.Errorf("/wait-for-drain answered %v after the last request, want about the drain delay %v", quiet, o.DrainDelay)
	}
	// The pod goes on: the app still answers through the sidecar.
	if code, _ := get(t, http.DefaultClient, "http://"+r.addr+"/"); code != 200 {
		t.Errorf("request after the preStop wait: %d", code)
	}
}

// TestWaitForDrainSendsGOAWAY: h2c connections (gRPC clients keep theirs
// for good) get a GOAWAY when the preStop wait begins, so their next request
// goes over a new connection, through the Service, while the pod still
// serves new ones.
func TestWaitForDrainSendsGOAWAY(t *testing.T) {
	app := startTestApp(t)
	o := testOptions(app.addr)
	o.DrainDelay = 300 * time.Millisecond
	r := startSidecar(t, o)
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	h2 := &http.Client{Transport: &http.Transport{Protocols: &protos}}
	var conns []net.Conn
	request := func() {
		t.Helper()
		trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { conns = append(conns, i.Conn) }}
		req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), http.MethodGet, "http://"+r.addr+"/", nil)
		resp, err := h2.Do(req)
		if err != nil {
			t.Fatalf("h2c request: %v", err)
		}
		io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.ProtoMajor != 2 {
			t.Fatalf("h2c request: %d over HTTP/%d", resp.StatusCode, resp.ProtoMajor)
		}
	}
	request()
	request()
	if conns[0] != conns[1] {
		t.Fatal("the h2c client did not reuse its connection before the drain")
	}
	done := make(chan int, 1)
	go func() {
		code, _ := get(t, http.DefaultClient, "http://"+r.admin+sidecarapi.WaitForDrainPath)
		done <- code
	}()
	testwait.For(t, 5*time.Second, "the GOAWAY", func() bool {
		request()
		return conns[len(conns)-1] != conns[0]
	})
	if code := <-done; code != 200 {
		t.Errorf("/wait-for-drain = %d", code)
	}
}

// TestWaitForDrainWaitsForInFlight: a request in flight holds the preStop
// wait past the delay, up to the drain timeout.
func TestWaitForDrainWaitsForInFlight(t *testing.T) {
	app := startTestApp(t)
	o := testOptions(app.addr)
	o.DrainDelay = 100 * time.Millisecond
	o.DrainTimeout = 400 * time.Millisecond
	r := startSidecar(t, o)
	go http.Get("http://" + r.addr + "/slow?d=2s")
	testwait.For(t, 5*time.Second, "slow request in flight", func() bool { return readStats(t, r).InFlight == 1 })
	start := time.Now()
	code, _ := get(t, http.DefaultClient, "http://"+r.admin+sidecarapi.WaitForDrainPath)
	took := time.Since(start)
	if code != 503 || took < o.DrainTimeout || took > o.DrainTimeout+time.Second {
		t.Errorf("/wait-for-drain with a request in flight: %d after %v, want 503 after the drain timeout %v", code, took, o.DrainTimeout)
	}
}

func TestDrainTimeoutCuts(t *testing.T) {
	app := startTestApp(t)
	o := testOptions(app.addr)
	o.DrainTimeout = 300 * time.Millisecond
	r := startSidecar(t, o)
	errc := make(chan error, 1)
	go func() {
		resp, err := http.Get("http://" + r.addr + "/slow?d=3s")
		if err == nil {
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		errc <- err
	}()
	testwait.For(t, 5*time.Second, "slow request in flight", func() bool { return readStats(t, r).InFlight == 1 })
	start := time.Now()
	r.cancel()
	<-r.done
	r.done <- nil
	took := time.Since(start)
	if took < o.DrainTimeout || took > o.DrainTimeout+1500*time.Millisecond {
		t.Errorf("Run returned %v after cancel, want about the drain timeout %v", took, o.DrainTimeout)
	}
	if err := <-errc; err == nil {
		t.Error("a request longer than the drain timeout was not cut")
	}
}

func TestStreamOutlivesIdleTimeout(t *testing.T) {
	app := startTestApp(t)
	o := testOptions(app.addr)
	o.IdleTimeout = 300 * time.Millisecond
	r := startSidecar(t, o)
	// 5 events 150ms apart: 600ms in all, twice the idle timeout, but never
	// idle for long.
	code, body := get(t, http.DefaultClient, "http://"+r.addr+"/sse?n=5&interval=150ms")
	if code != 200 || strings.Count(body, "data: ") != 5 {
		t.Errorf("long stream: %d %q", code, body)
	}
}

// TestReadyFollowsTheAppsReadinessCheck: with the app's readiness probe
// handed over (--app-readiness), /ready says 200 only while the app's own
// check passes, not as soon as its port accepts; the checks reach the app
// directly and are never counted.
func TestReadyFollowsTheAppsReadinessCheck(t *testing.T) {
	var ready atomic.Bool
	var checks atomic.Int64
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	app := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			checks.Add(1)
			if r.Header.Get("X-Probe") != "yes" || !ready.Load() {
				http.Error(w, "warming caches", http.StatusServiceUnavailable)
				return
			}
		}
		io.WriteString(w, "ok\n")
	})}
	go app.Serve(ln)
	t.Cleanup(func() { app.Close() })
	port := ln.Addr().(*net.TCPAddr).Port
	o := testOptions(ln.Addr().String())
	o.AppReadiness = readiness.Check{HTTP: &readiness.HTTPGet{Port: int32(port), Path: "/healthz", Headers: []readiness.Header{{Name: "X-Probe", Value: "yes"}}}, FailureThreshold: 1}.String()
	r := startSidecar(t, o)

	code, body := get(t, http.DefaultClient, "http://"+r.admin+sidecarapi.ReadyPath)
	if want := "the app is not ready: GET http://127.0.0.1:" + strconv.Itoa(port) + "/healthz: answered 503 Service Unavailable\n"; code != 503 || body != want {
		t.Errorf("/ready while the app warms up: %d %q, want 503 %q", code, body, want)
	}
	// The port answers meanwhile: requests go through, as Kubernetes would
	// not send them but a client on the pod IP might.
	if code, _ := get(t, http.DefaultClient, "http://"+r.addr+"/"); code != 200 {
		t.Errorf("request while not ready: %d", code)
	}
	ready.Store(true)
	start := time.Now()
	testwait.For(t, 5*time.Second, "ready", func() bool {
		code, _ := get(t, http.DefaultClient, "http://"+r.admin+sidecarapi.ReadyPath)
		return code == 200
	})
	if took := time.Since(start); took > time.Second {
		t.Errorf("ready %v after the app's check passed, want well under a second", took)
	}
	ready.Store(false)
	testwait.For(t, 5*time.Second, "not ready again", func() bool {
		code, _ := get(t, http.DefaultClient, "http://"+r.admin+sidecarapi.ReadyPath)
		return code == 503
	})
	if got := readStats(t, r).Total; got != 1 {
		t.Errorf("total = %d after %d readiness checks, want 1: checks are not counted", got, checks.Load())
	}
}
