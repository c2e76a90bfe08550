package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gorilla/websocket"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/ebb-dev/ebb/internal/sidecarapi"
)

// config is the test app's options.
type config struct {
	listen       string
	startupDelay time.Duration
	delay        time.Duration
	readyPath    string
	readyAfter   time.Duration
	name         string
	// inFlightHeaders adds X-App-In-Flight and X-App-Max-In-Flight to
	// every counted response (off by default: the benchmarks' app answers
	// as it always did).
	inFlightHeaders bool
	hostileStats    string // a hostile /stats answer instead of the app (see hostileModes)
	// downstream is the base URL of the app this one calls on GET /chain
	// (a chain of apps, each needing the next); /chain ends the chain
	// when it is empty.
	downstream string
}

func parseConfig(args []string, getenv func(string) string) (config, error) {
	c := config{listen: ":8080", readyPath: "/healthz"}
	var problems []error
	fs := flag.NewFlagSet("ebb-test-app", flag.ContinueOnError)
	str := func(p *string, name, env, usage string) {
		if v := getenv(env); v != "" {
			*p = v
		}
		fs.StringVar(p, name, *p, usage+" (env "+env+")")
	}
	dur := func(p *time.Duration, name, env, usage string) {
		if v := getenv(env); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil {
				problems = append(problems, fmt.Errorf("%s=%q: not a duration", env, v))
			}
			*p = d
		}
		fs.DurationVar(p, name, *p, usage+" (env "+env+")")
	}
	str(&c.listen, "listen", "LISTEN", "address to serve on")
	dur(&c.startupDelay, "startup-delay", "STARTUP_DELAY", "wait this long before binding the port")
	dur(&c.delay, "delay", "DELAY", "added to every request")
	str(&c.readyPath, "ready-path", "READY_PATH", "path that answers 200 once serving")
	dur(&c.readyAfter, "ready-after", "READY_AFTER", "the ready path answers 503 for this long after the port is bound (an app warming up behind its readiness probe; every response then says X-App-Ready)")
	if v := getenv("IN_FLIGHT_HEADERS"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			problems = append(problems, fmt.Errorf("IN_FLIGHT_HEADERS=%q: not a boolean", v))
		}
		c.inFlightHeaders = b
	}
	fs.BoolVar(&c.inFlightHeaders, "in-flight-headers", c.inFlightHeaders, "say on every response but the ready path's how many requests were in flight when it arrived (X-App-In-Flight) and the most at once so far (X-App-Max-In-Flight) (env IN_FLIGHT_HEADERS)")
	str(&c.downstream, "downstream", "DOWNSTREAM", "base URL of the app GET /chain calls (its /chain), whose answer follows this pod's name in the answer; a failure of the call answers 502 with the reason")
	str(&c.hostileStats, "hostile-stats", "HOSTILE_STATS", "serve, on --listen, a hostile answer to every request instead of the app, as a pod that poses as an ebb sidecar would: "+strings.Join(hostileModeNames(), ", "))
	if err := fs.Parse(args); err != nil {
		problems = append(problems, err)
	}
	if _, ok := hostileModes[c.hostileStats]; c.hostileStats != "" && !ok {
		problems = append(problems, fmt.Errorf("--hostile-stats %q: want one of %s", c.hostileStats, strings.Join(hostileModeNames(), ", ")))
	}
	if c.startupDelay < 0 || c.delay < 0 || c.readyAfter < 0 {
		problems = append(problems, errors.New("delays must not be negative"))
	}
	if !strings.HasPrefix(c.readyPath, "/") {
		problems = append(problems, fmt.Errorf("--ready-path %q: must start with /", c.readyPath))
	}
	if c.downstream != "" {
		if u, err := url.Parse(c.downstream); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			problems = append(problems, fmt.Errorf("--downstream %q: want an http:// or https:// URL with a host", c.downstream))
		}
		c.downstream = strings.TrimSuffix(c.downstream, "/")
	}
	c.name = getenv("POD_NAME")
	if c.name == "" {
		c.name, _ = os.Hostname()
	}
	return c, errors.Join(problems...)
}

// started is when the process began; the ready path reports it (header
// X-App-Started, RFC 3339 with nanoseconds) so that a test can tell the
// app's own start-up from the node's work before it.
var started = time.Now()

func main() {
	cfg, err := parseConfig(os.Args[1:], os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ebb-test-app:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "ebb-test-app:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg config) error {
	if cfg.startupDelay > 0 {
		select {
		case <-time.After(cfg.startupDelay):
		case <-ctx.Done():
			return nil
		}
	}
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	slog.Info("ebb-test-app serving", "addr", ln.Addr().String(), "hostileStats", cfg.hostileStats)
	if cfg.hostileStats != "" {
		return serveHostile(ctx, ln, hostileModes[cfg.hostileStats])
	}
	return serve(ctx, ln, cfg)
}

// serve serves HTTP/1.1, h2c and gRPC on ln until ctx is done, then shuts
// down gracefully.
func serve(ctx context.Context, ln net.Listener, cfg config) error {
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: newHandler(cfg), Protocols: &protos, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shut down: %w", err)
	}
	return nil
}

// echoTrailerKey is the gRPC metadata key echoed back as a trailer.
const echoTrailerKey = "ebb-echo"

var (
	textPlain   = []string{"text/plain; charset=utf-8"}
	eventStream = []string{"text/event-stream"}
	noCache     = []string{"no-cache"}
	upgrader    = websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}
)

func newHandler(cfg config) http.Handler {
	hello := []byte("hello from " + cfg.name + "\n")
	helloLen := []string{strconv.Itoa(len(hello))}
	readyAt := time.Now().Add(cfg.readyAfter)
	yes, no := []string{"true"}, []string{"false"}
	startedHeader := []string{started.Format(time.RFC3339Nano)}

	var load loadMeter
	chain := chainHandler(cfg.name, cfg.downstream)

	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus("ebb.test", healthpb.HealthCheckResponse_SERVING)
	gs := grpc.NewServer(grpc.UnaryInterceptor(echoTrailer))
	healthpb.RegisterHealthServer(gs, hs)

	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
			gs.ServeHTTP(w, r)
			return
		}
		if r.URL.Path == inFlightPath {
			load.serve(w)
			return
		}
		if r.URL.Path == cfg.readyPath {
			w.Header()["X-App-Started"] = startedHeader
		} else {
			// Every request but the ready path's (probes go straight to
			// the app's port) and the meter's own is counted.
			n := load.begin()
			defer load.end()
			if cfg.inFlightHeaders {
				w.Header()["X-App-In-Flight"] = []string{strconv.FormatInt(n, 10)}
			}
		}
		if cfg.readyAfter > 0 {
			ready := !time.Now().Before(readyAt)
			if ready {
				w.Header()["X-App-Ready"] = yes
			} else {
				w.Header()["X-App-Ready"] = no
			}
			if r.URL.Path == cfg.readyPath && !ready {
				http.Error(w, "warming up", http.StatusServiceUnavailable)
				return
			}
		}
		if cfg.delay > 0 {
			time.Sleep(cfg.delay)
		}
		if r.URL.RawQuery != "" {
			if d, err := time.ParseDuration(r.URL.Query().Get("delay")); err == nil && d > 0 {
				time.Sleep(d)
			}
		}
		if cfg.inFlightHeaders && r.URL.Path != cfg.readyPath {
			w.Header()["X-App-Max-In-Flight"] = []string{strconv.FormatInt(load.max.Load(), 10)}
		}
		path := r.URL.Path
		if strings.HasPrefix(path, "/hello/") {
			path = "/" // any path under /hello/ is answered as / is (routing tests)
		}
		switch path {
		case "/":
			h := w.Header()
			h["Content-Type"] = textPlain
			h["Content-Length"] = helloLen
			w.Write(hello)
		case cfg.readyPath:
			w.Header()["Content-Type"] = textPlain
			w.Write([]byte("ok\n"))
		case "/sse":
			serveSSE(w, r)
		case "/ws":
			serveWebSocket(w, r)
		case "/echo":
			serveEcho(w, r)
		case "/headers":
			serveHeaders(w, r)
		case chainPath:
			chain(w, r)
		default:
			http.NotFound(w, r)
		}
	})
}

// serveSSE sends n events, interval apart, each flushed on its own.
func serveSSE(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	n, err := strconv.Atoi(q.Get("n"))
	if err != nil || n < 0 {
		n = 5
	}
	interval, err := time.ParseDuration(q.Get("interval"))
	if err != nil || interval < 0 {
		interval = 50 * time.Millisecond
	}
	h := w.Header()
	h["Content-Type"] = eventStream
	h["Cache-Control"] = noCache
	rc := http.NewResponseController(w)
	for i := range n {
		if i > 0 {
			select {
			case <-time.After(interval):
			case <-r.Context().Done():
				return
			}
		}
		fmt.Fprintf(w, "id: %d\ndata: event %d\n\n", i, i)
		if err := rc.Flush(); err != nil {
			return
		}
	}
}

// inFlightPath answers how many requests the app has in flight, the most
// it has had at once and how many it has served (loadMeter.serve), itself
// not counted: a test reads it from the pod's own address, past the
// sidecar, to see what the app was given at once.
const inFlightPath = "/inflight"

// loadMeter counts the requests the app serves: in flight now, the most in
// flight at once since the process started, and the total.
type loadMeter struct {
	inFlight, max, total atomic.Int64
}

// begin counts a request in and returns the number in flight with it.
func (m *loadMeter) begin() int64 {
	m.total.Add(1)
	n := m.inFlight.Add(1)
	for {
		most := m.max.Load()
		if n <= most || m.max.CompareAndSwap(most, n) {
			return n
		}
	}
}

func (m *loadMeter) end() { m.inFlight.Add(-1) }

// serve answers the figures as headers X-App-In-Flight, X-App-Max-In-Flight,
// X-App-Requests and as the body "in-flight N\nmax-in-flight N\nrequests N\n".
func (m *loadMeter) serve(w http.ResponseWriter) {
	in, most, total := strconv.FormatInt(m.inFlight.Load(), 10), strconv.FormatInt(m.max.Load(), 10), strconv.FormatInt(m.total.Load(), 10)
	h := w.Header()
	h["Content-Type"] = textPlain
	h["X-App-In-Flight"], h["X-App-Max-In-Flight"], h["X-App-Requests"] = []string{in}, []string{most}, []string{total}
	io.WriteString(w, "in-flight "+in+"\nmax-in-flight "+most+"\nrequests "+total+"\n")
}

// serveWebSocket echoes every message until the peer closes. With
// ?silent=1 it accepts the upgrade and then never sends a byte and takes
// no notice of what it receives (an app that stopped answering on a
// tunnel), until the connection is closed.
func serveWebSocket(w http.ResponseWriter, r *http.Request) {
	c, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return // Upgrade has answered already
	}
	defer c.Close()
	if r.URL.Query().Get("silent") == "1" {
		// Read only to learn that the connection closed; nothing read is
		// answered, not even a ping or a close frame.
		_, _ = io.Copy(io.Discard, c.NetConn())
		return
	}
	for {
		mt, msg, err := c.ReadMessage()
		if err != nil {
			return
		}
		if err := c.WriteMessage(mt, msg); err != nil {
			return
		}
	}
}

// serveEcho streams the request body back as it arrives.
func serveEcho(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	rc.EnableFullDuplex()
	if ct := r.Header.Get("Content-Type"); ct != "" {
		w.Header().Set("Content-Type", ct)
	}
	w.WriteHeader(http.StatusOK)
	rc.Flush()
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			rc.Flush()
		}
		if err != nil {
			return
		}
	}
}

// chainPath answers the pod's name, then, with --downstream, the answer of
// the downstream app's chainPath: one line per hop, so that a request to
// the first app of a chain (frontend → api → db) shows which pod served
// each hop.
const chainPath = "/chain"

// chainHandler serves chainPath for the pod name, calling downstream (a
// base URL, or "" at the end of the chain) with one client, built once.
func chainHandler(name, downstream string) http.HandlerFunc {
	client := &http.Client{Timeout: 2 * time.Minute}
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Content-Type"] = textPlain
		if downstream == "" {
			io.WriteString(w, name+"\n")
			return
		}
		fail := func(format string, a ...any) {
			http.Error(w, name+": downstream "+downstream+chainPath+": "+fmt.Sprintf(format, a...), http.StatusBadGateway)
		}
		req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, downstream+chainPath, nil)
		if err != nil {
			fail("%v", err)
			return
		}
		resp, err := client.Do(req)
		if err != nil {
			fail("%v", err)
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		switch {
		case err != nil:
			fail("reading the answer: %v", err)
		case resp.StatusCode != http.StatusOK:
			fail("%s: %s", resp.Status, strings.TrimSpace(string(b)))
		default:
			io.WriteString(w, name+"\n"+string(b))
		}
	}
}

// serveHeaders writes the request's method, host and headers, one per line,
// sorted, so that tests can see what a proxy forwarded.
func serveHeaders(w http.ResponseWriter, r *http.Request) {
	lines := []string{"Method: " + r.Method, "Host: " + r.Host}
	for k, vs := range r.Header {
		for _, v := range vs {
			lines = append(lines, k+": "+v)
		}
	}
	slices.Sort(lines)
	w.Header()["Content-Type"] = textPlain
	io.WriteString(w, strings.Join(lines, "\n")+"\n")
}

// echoTrailer sends the value of the request metadata key ebb-echo back as a
// trailer, so that a test can see trailers cross a proxy.
func echoTrailer(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get(echoTrailerKey); len(v) > 0 {
			grpc.SetTrailer(ctx, metadata.Pairs(echoTrailerKey, v[0]))
		}
	}
	return handler(ctx, req)
}

// hostileModes are the answers of --hostile-stats: what a pod that carries
// an app's label and poses as its ebb sidecar (a container named ebb-sidecar
// with a port named ebb-admin) may send the scaler that reads its /stats.
// Each is written on the raw connection, once per request read.
var hostileModes = map[string]func(c net.Conn, n int){
	// A valid head announcing a 1 GiB body, then the body.
	"huge": func(c net.Conn, _ int) {
		const size = 1 << 30
		if _, err := io.WriteString(c, statsHead+"Content-Length: "+strconv.Itoa(size)+"\r\n\r\n"); err != nil {
			return
		}
		chunk := []byte(strings.Repeat("9", 64<<10))
		for sent := 0; sent < size; sent += len(chunk) {
			if _, err := c.Write(chunk); err != nil {
				return
			}
		}
	},
	// A chunked body whose first chunk says 1 GiB, then endless data.
	"huge-chunked": func(c net.Conn, _ int) {
		if _, err := io.WriteString(c, statsHead+"Transfer-Encoding: chunked\r\n\r\n40000000\r\n"); err != nil {
			return
		}
		chunk := []byte(strings.Repeat("9", 64<<10))
		for {
			if _, err := c.Write(chunk); err != nil {
				return
			}
		}
	},
	// Header lines for ever, no body.
	"endless-head": func(c net.Conn, _ int) {
		if _, err := io.WriteString(c, statsHead); err != nil {
			return
		}
		for {
			if _, err := io.WriteString(c, "X-Pad: "+strings.Repeat("x", 100)+"\r\n"); err != nil {
				return
			}
		}
	},
	// A valid answer, one byte a second.
	"slow": func(c net.Conn, _ int) {
		for _, b := range []byte(statsLine("0 0 1 0")) {
			if _, err := c.Write([]byte{b}); err != nil {
				return
			}
			time.Sleep(time.Second)
		}
	},
	// Reads the request and never answers.
	"never": func(net.Conn, int) { select {} },
	// Not HTTP.
	"garbage": func(c net.Conn, _ int) {
		_, _ = io.WriteString(c, "\x00\xff SSH-2.0-OpenSSH_9.6\r\n<html>nope</html>\n")
	},
	// Forged figures in a valid answer.
	"inflight-max":      func(c net.Conn, _ int) { _, _ = io.WriteString(c, statsLine("9223372036854775807 0 1 0")) },
	"inflight-negative": func(c net.Conn, _ int) { _, _ = io.WriteString(c, statsLine("-5 0 1 0")) },
	"inflight-absurd":   func(c net.Conn, _ int) { _, _ = io.WriteString(c, statsLine("4000000000 0 1 0")) },
	// A new boot ID at every read, with a counter that grows by 1000.
	"boot-churn": func(c net.Conn, n int) {
		_, _ = io.WriteString(c, statsLine(fmt.Sprintf("1 %d %d 0", 1000*(n+1), time.Now().UnixNano())))
	},
	// A counter that goes backwards under the same boot ID.
	"counter-backwards": func(c net.Conn, n int) {
		_, _ = io.WriteString(c, statsLine(fmt.Sprintf("0 %d 1 0", 1_000_000-n)))
	},
}

func hostileModeNames() []string {
	names := make([]string, 0, len(hostileModes))
	for k := range hostileModes {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
}

// statsHead opens every answer as a sidecar's does (status 200 and the
// stats line's Content-Type), so that the scaler gets to what each mode
// tests.
const statsHead = "HTTP/1.1 200 OK\r\nContent-Type: " + sidecarapi.StatsContentType + "\r\n"

// statsLine answers a stats line of this version with the given figures
// (in flight, total, boot ID, busy milliseconds), as a sidecar would.
func statsLine(figures string) string {
	body := sidecarapi.StatsVersion + " " + figures + "\n"
	return statsHead + "Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
}

// serveHostile answers every request head read on ln with answer, keeping
// the connection for the next request, until ctx is done.
func serveHostile(ctx context.Context, ln net.Listener, answer func(net.Conn, int)) error {
	go func() { <-ctx.Done(); ln.Close() }()
	var n atomic.Int64
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("accept: %w", err)
		}
		go func() {
			defer c.Close()
			br := bufio.NewReader(c)
			for {
				// One request head: lines up to an empty one.
				for {
					line, err := br.ReadString('\n')
					if err != nil {
						return
					}
					if line == "\r\n" || line == "\n" {
						break
					}
				}
				answer(c, int(n.Add(1)))
			}
		}()
	}
}
