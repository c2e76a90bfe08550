package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/ebb-dev/ebb/activator/proxy"
	"github.com/ebb-dev/ebb/internal/holdpush"
	"github.com/ebb-dev/ebb/internal/routing"
)

// childConfig is what the activator child serves.
type childConfig struct {
	Listen string     `json:"listen"`
	Scaler string     `json:"scaler"`
	Apps   []childApp `json:"apps"`
}

type childApp struct {
	Name      string           `json:"name"`
	Host      string           `json:"host"`
	QueueSize int              `json:"queueSize"`
	Endpoints []proxy.Endpoint `json:"endpoints"`
}

func main() {
	if len(os.Args) == 3 && os.Args[1] == "child" {
		if err := child(os.Args[2]); err != nil {
			log.Fatal(err)
		}
		return
	}
	duration := flag.Duration("duration", 5*time.Second, "length of each wrk run")
	rounds := flag.Int("rounds", 3, "wrk rounds (median reported)")
	trials := flag.Int("trials", 30, "sidecar-ready trials")
	wakes := flag.Int("wakes", 200, "wake-signal trials")
	hold := flag.Int("hold", 10000, "requests held at once for the RSS figure")
	release := flag.Int("release", 5000, "requests held, then released at once, for the release figure (each takes an activator socket to the client and one to the app)")
	baseline := flag.String("baseline", "", "this program built from an earlier commit (its child mode runs that build's activator): every held-request figure is measured for both builds in one run, side by side")
	port := flag.Int("port", 19500, "first loopback port used")
	smoke := flag.Bool("smoke", false, "check that the bench still runs end to end, in seconds: -duration 1s -rounds 1 -trials 2 -wakes 10 -hold 200 -release 100")
	flag.Parse()
	if *smoke {
		*duration, *rounds, *trials, *wakes, *hold, *release = time.Second, 1, 2, 10, 200, 100
	}
	if *duration <= 0 || *duration > time.Minute || *rounds < 1 || *rounds > 9 || *trials < 1 || *trials > 200 || *wakes < 1 || *wakes > 2000 || *hold < 1 || *hold > 15000 || *release < 1 || *release > 8000 {
		log.Fatal("out of bounds: 0 < -duration <= 1m, -rounds 1..9, -trials 1..200, -wakes 1..2000, -hold 1..15000, -release 1..8000")
	}
	if err := run(config{*duration, *rounds, *trials, *wakes, *hold, *release, *port, *baseline}); err != nil {
		log.Fatal(err)
	}
}

// child runs the activator's data plane from a config file until killed.
func child(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var cfg childConfig
	if err := json.Unmarshal(b, &cfg); err != nil {
		return err
	}
	push, err := holdpush.NewClient(holdpush.ClientOptions{Activator: "bench/activator-0"})
	if err != nil {
		return err
	}
	push.SetAddresses([]string{cfg.Scaler})
	rt := proxy.NewRouter(proxy.RouterOptions{Pusher: push, MaxHeld: 50000, ColdStartTimeout: 5 * time.Minute})
	var routes []routing.Route[proxy.AppConfig]
	for _, a := range cfg.Apps {
		k := routing.Key{Namespace: "bench", Name: a.Name}
		routes = append(routes, routing.Route[proxy.AppConfig]{Key: k, Hosts: []string{a.Host}, Value: proxy.AppConfig{QueueSize: a.QueueSize}})
		rt.SetEndpoints(k, a.Endpoints)
	}
	rt.SetRoutes(routes, nil)
	if os.Getenv("EBB_BENCH_MEMSTATS") != "" {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGUSR1)
		go func() {
			for range sig {
				var m runtime.MemStats
				runtime.ReadMemStats(&m)
				fmt.Fprintf(os.Stderr, "memstats: heapInuse %d MiB, stackInuse %d MiB, sys %d MiB, goroutines %d\n", m.HeapInuse>>20, m.StackInuse>>20, m.Sys>>20, runtime.NumGoroutine())
			}
		}()
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return err
	}
	// As Run serves it: warm HTTP/1.1 by the engine, the rest by net/http.
	srv := &http.Server{Handler: rt, ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 64 << 10, IdleTimeout: 120 * time.Second}
	return proxy.NewServer(rt, srv).Serve(ln)
}

type procs struct {
	mu sync.Mutex
	ps []*exec.Cmd
}

func (p *procs) start(name string, args ...string) (*exec.Cmd, error) {
	cmd := exec.Command(name, args...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p.mu.Lock()
	p.ps = append(p.ps, cmd)
	p.mu.Unlock()
	return cmd, nil
}

func stop(cmd *exec.Cmd) {
	cmd.Process.Kill()
	cmd.Wait()
}

func (p *procs) stopAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.ps {
		if c.ProcessState == nil {
			stop(c)
		}
	}
}

func binDir() (string, error) {
	if d := os.Getenv("EBB_BIN_DIR"); d != "" {
		return d, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	return filepath.Join(wd, "bin"), nil
}

func ensureBins(dir string) error {
	for bin, pkg := range map[string]string{"ebb-sidecar": "./cmd/ebb-sidecar", "ebb-test-app": "./test/app"} {
		if _, err := os.Stat(filepath.Join(dir, bin)); err == nil {
			continue
		}
		out, err := exec.Command("go", "build", "-o", filepath.Join(dir, bin), pkg).CombinedOutput()
		if err != nil {
			return fmt.Errorf("build %s: %w: %s", bin, err, out)
		}
	}
	if _, err := exec.LookPath("wrk"); err != nil {
		return fmt.Errorf("wrk is needed: %w", err)
	}
	return nil
}

func waitHTTP(url string, want int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	c := &http.Client{Timeout: 200 * time.Millisecond}
	for time.Now().Before(deadline) {
		if resp, err := c.Get(url); err == nil {
			resp.Body.Close()
			if want == 0 || resp.StatusCode == want {
				return nil
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	return fmt.Errorf("%s did not answer %d within %s", url, want, timeout)
}

// config is the bench's flags.
type config struct {
	duration                    time.Duration
	rounds, trials, wakes, hold int
	release, base               int
	baseline                    string
}

// figures are one build's measurements.
type figures struct {
	direct, through  float64 // req/s
	wake, ready, rel []time.Duration
	idleRSS, heldRSS float64 // MiB
}

func addr(p int) string { return "127.0.0.1:" + strconv.Itoa(p) }

// build is one activator build under measurement, with its own holdpush
// server (the scaler's side) and its cold app's sidecar admin port.
type build struct {
	name, bin                           string
	actPort, pushPort, admin, probeBase int
	changes                             chan change
	push                                *holdpush.Server
	coldReady                           atomic.Bool
	act                                 *exec.Cmd
	f                                   figures
}

func run(c config) error {
	dir, err := binDir()
	if err != nil {
		return err
	}
	if err := ensureBins(dir); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	var ps procs
	defer ps.stopAll()
	appPort := c.base
	if _, err := ps.start(filepath.Join(dir, "ebb-test-app"), "--listen="+addr(appPort)); err != nil {
		return err
	}
	if err := waitHTTP("http://"+addr(appPort)+"/", 200, 10*time.Second); err != nil {
		return err
	}
	builds := []*build{{name: "this", bin: self}}
	if c.baseline != "" {
		builds = append(builds, &build{name: "baseline", bin: c.baseline})
	}
	for i, b := range builds {
		p := c.base + 1 + 4*i
		b.actPort, b.pushPort, b.admin, b.probeBase = p, p+1, p+2, c.base+10+3*c.trials*i
		stop, err := b.start(c, &ps, appPort)
		if err != nil {
			return fmt.Errorf("%s build: %w", b.name, err)
		}
		defer stop()
	}
	// Each step takes every build in turn, the order alternating, so that
	// what else the machine does weighs on both alike.
	each := func(i int, f func(b *build) error) error {
		for k := range builds {
			b := builds[(k+i)%len(builds)]
			if err := f(b); err != nil {
				return fmt.Errorf("%s build: %w", b.name, err)
			}
		}
		return nil
	}
	// 1. Warm forwarding ÷ direct, interleaved rounds, medians.
	direct := []float64{}
	through := make([][]float64, len(builds))
	for i := range c.rounds {
		v, err := wrkRPS(c.duration, addr(appPort), "")
		if err != nil {
			return err
		}
		direct = append(direct, v)
		for k := range builds {
			k = (k + i) % len(builds)
			v, err := wrkRPS(c.duration, addr(builds[k].actPort), "warm.test")
			if err != nil {
				return err
			}
			through[k] = append(through[k], v)
		}
	}
	for k, b := range builds {
		b.f.direct, b.f.through = median(direct), median(through[k])
	}
	// 2. First held request → wake signal at the holdpush server.
	time.Sleep(300 * time.Millisecond) // the push streams connect
	for i := range c.wakes {
		if err := each(i, (*build).wake); err != nil {
			return err
		}
	}
	// 3. Sidecar ready → first held request answered.
	for i := range c.trials {
		if err := each(i, func(b *build) error { return b.ready(&ps, dir, i) }); err != nil {
			return err
		}
	}
	// 4. RSS holding c.hold requests at once; 5. c.release requests
	// released at once.
	if err := each(0, func(b *build) error { return b.holdRSS(c.hold) }); err != nil {
		return err
	}
	if err := each(1, func(b *build) error { return b.release(c.release) }); err != nil {
		return err
	}
	var base *figures
	if len(builds) > 1 {
		base = &builds[1].f
	}
	report(c, &builds[0].f, base)
	return nil
}

// start starts b's holdpush server, its cold app's admin endpoint (503
// until release flips it) and its activator; stop stops the servers.
func (b *build) start(c config, ps *procs, appPort int) (stop func(), err error) {
	b.changes = make(chan change, 4*max(c.hold, c.release)+16)
	b.push = holdpush.NewServer(holdpush.ServerOptions{OnChange: func(app holdpush.App, held int64) {
		if app.Name == "cold" {
			select {
			case b.changes <- change{time.Now(), held}:
			default:
			}
		}
	}})
	gs := grpc.NewServer()
	b.push.Register(gs)
	ln, err := net.Listen("tcp", addr(b.pushPort))
	if err != nil {
		return nil, err
	}
	go gs.Serve(ln)
	aln, err := net.Listen("tcp", addr(b.admin))
	if err != nil {
		gs.Stop()
		return nil, err
	}
	admin := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if !b.coldReady.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})}
	go admin.Serve(aln)
	stop = func() {
		gs.Stop()
		admin.Close()
	}
	cfg := childConfig{Listen: addr(b.actPort), Scaler: addr(b.pushPort), Apps: []childApp{
		{Name: "warm", Host: "warm.test", Endpoints: []proxy.Endpoint{{Addr: addr(appPort), Ready: true}}},
		{Name: "cold", Host: "cold.test", QueueSize: max(c.hold, c.release), Endpoints: []proxy.Endpoint{{Addr: addr(appPort), AdminAddr: addr(b.admin)}}},
	}}
	for i := range c.trials {
		d, a := b.probeBase+3*i, b.probeBase+3*i+1
		cfg.Apps = append(cfg.Apps, childApp{Name: fmt.Sprintf("probe-%d", i), Host: fmt.Sprintf("probe-%d.test", i),
			Endpoints: []proxy.Endpoint{{Addr: addr(d), AdminAddr: addr(a)}}})
	}
	cfgFile, err := os.CreateTemp("", "ebb-bench-activator-*.json")
	if err != nil {
		stop()
		return nil, err
	}
	defer os.Remove(cfgFile.Name())
	if err := json.NewEncoder(cfgFile).Encode(cfg); err != nil {
		stop()
		return nil, err
	}
	cfgFile.Close()
	if b.act, err = ps.start(b.bin, "child", cfgFile.Name()); err != nil {
		stop()
		return nil, err
	}
	if err := waitHTTP("http://"+addr(b.actPort)+"/", 404, 10*time.Second); err != nil {
		stop()
		return nil, err
	}
	return stop, nil
}

// wake sends one request to the cold app and times the held count
// reaching the holdpush server; the client then leaves.
func (b *build) wake() error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr(b.actPort)+"/", nil)
	req.Host = "cold.test"
	t0 := time.Now()
	go func() {
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	got, err := awaitHeld(b.changes, func(n int64) bool { return n >= 1 }, 5*time.Second)
	if err != nil {
		return fmt.Errorf("wake signal: %w", err)
	}
	b.f.wake = append(b.f.wake, got.Sub(t0))
	cancel()
	if _, err := awaitHeld(b.changes, func(n int64) bool { return n == 0 }, 5*time.Second); err != nil {
		return fmt.Errorf("held back to 0 after the client left: %w", err)
	}
	return nil
}

// ready holds a request for probe app i, starts its sidecar's app and
// times the answer from the sidecar turning ready.
func (b *build) ready(ps *procs, dir string, i int) error {
	d, a, u := b.probeBase+3*i, b.probeBase+3*i+1, b.probeBase+3*i+2
	sc, err := ps.start(filepath.Join(dir, "ebb-sidecar"), "--listen="+addr(d), "--admin-listen="+addr(a), "--upstream="+addr(u), "--log-level=error")
	if err != nil {
		return err
	}
	defer stop(sc)
	if err := waitHTTP("http://"+addr(a)+"/ready", 503, 5*time.Second); err != nil {
		return err
	}
	answered := make(chan time.Time, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr(b.actPort)+"/", nil)
		req.Host = fmt.Sprintf("probe-%d.test", i)
		resp, err := http.DefaultClient.Do(req)
		if err == nil && resp.StatusCode == 200 {
			resp.Body.Close()
			answered <- time.Now()
			return
		}
		close(answered)
	}()
	time.Sleep(50 * time.Millisecond) // the request is held and probing
	appCmd, err := ps.start(filepath.Join(dir, "ebb-test-app"), "--listen="+addr(u))
	if err != nil {
		return err
	}
	defer stop(appCmd)
	// When did the sidecar turn ready? Poll its /ready every 1 ms.
	var readyAt time.Time
	hc := &http.Client{Timeout: 100 * time.Millisecond}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if resp, err := hc.Get("http://" + addr(a) + "/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				readyAt = time.Now()
				break
			}
		}
	}
	select {
	case at, ok := <-answered:
		if !ok || readyAt.IsZero() {
			return fmt.Errorf("trial %d: held request not answered 200 (sidecar ready: %v)", i, !readyAt.IsZero())
		}
		b.f.ready = append(b.f.ready, max(0, at.Sub(readyAt)))
	case <-time.After(10 * time.Second):
		return fmt.Errorf("trial %d: held request not answered within 10s of the sidecar turning ready", i)
	}
	return nil
}

// holdRSS reads the activator's RSS idle, then holding n requests.
func (b *build) holdRSS(n int) error {
	b.f.idleRSS, _ = rssMiB(b.act.Process.Pid)
	conns, err := openHeld(addr(b.actPort), "cold.test", n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	if err != nil {
		return err
	}
	if _, err := awaitHeld(b.changes, func(h int64) bool { return h == int64(n) }, 30*time.Second); err != nil {
		return fmt.Errorf("holding %d: %w (activator holds %d)", n, err, b.push.Held(holdpush.App{Namespace: "bench", Name: "cold"}))
	}
	time.Sleep(500 * time.Millisecond)
	b.act.Process.Signal(syscall.SIGUSR1)
	time.Sleep(100 * time.Millisecond)
	if b.f.heldRSS, err = rssMiB(b.act.Process.Pid); err != nil {
		return err
	}
	for _, c := range conns {
		c.Close()
	}
	if _, err := awaitHeld(b.changes, func(h int64) bool { return h == 0 }, 30*time.Second); err != nil {
		return fmt.Errorf("held back to 0 after %d clients left: %w", n, err)
	}
	return nil
}

// release holds n requests, turns the cold app ready (its /ready answers
// 200) and times each answer from then.
func (b *build) release(n int) error {
	conns, err := openHeld(addr(b.actPort), "cold.test", n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	if err != nil {
		return err
	}
	if _, err := awaitHeld(b.changes, func(h int64) bool { return h == int64(n) }, 30*time.Second); err != nil {
		return fmt.Errorf("holding %d: %w", n, err)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	var failed error
	t0 := time.Now()
	b.coldReady.Store(true)
	defer b.coldReady.Store(false)
	for _, conn := range conns {
		wg.Go(func() {
			conn.SetReadDeadline(time.Now().Add(30 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			at := time.Since(t0)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode != 200 {
					err = fmt.Errorf("released request answered %d", resp.StatusCode)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil && failed == nil {
				failed = err
			}
			b.f.rel = append(b.f.rel, at)
		})
	}
	wg.Wait()
	return failed
}

// report prints the figures of this build, and of the baseline build
// beside them when there is one.
func report(c config, this, base *figures) {
	ok := func(b bool) string {
		if b {
			return "yes"
		}
		return "**no**"
	}
	fmt.Printf("\n### Activator (%d CPUs, wrk c=64 %s × %d rounds, median)\n\n", runtimeCPUs(), c.duration, c.rounds)
	if base == nil {
		fmt.Println("| figure | measured | target | met |")
		fmt.Println("|---|---|---|---|")
	} else {
		fmt.Println("| figure | this build | baseline build | this ÷ baseline | target | met |")
		fmt.Println("|---|---|---|---|---|---|")
	}
	row := func(name string, v func(*figures) string, ratio func(*figures) float64, target string, met func(*figures) bool) {
		if base == nil {
			fmt.Printf("| %s | %s | %s | %s |\n", name, v(this), target, ok(met(this)))
			return
		}
		fmt.Printf("| %s | %s | %s | %.2f | %s | %s |\n", name, v(this), v(base), ratio(this)/ratio(base), target, ok(met(this)))
	}
	row("app direct", func(f *figures) string { return fmt.Sprintf("%.0f req/s", f.direct) }, func(f *figures) float64 { return f.direct }, "—", func(*figures) bool { return true })
	row("warm, through the activator", func(f *figures) string { return fmt.Sprintf("%.0f req/s", f.through) }, func(f *figures) float64 { return f.through }, "—", func(*figures) bool { return true })
	row("warm through ÷ direct (c=64)", func(f *figures) string { return fmt.Sprintf("%.2f", f.through/f.direct) }, func(f *figures) float64 { return f.through / f.direct }, "≥ 0.40", func(f *figures) bool { return f.through/f.direct >= 0.40 })
	row(fmt.Sprintf("sidecar ready → held request answered (%d trials), p50 / p99", c.trials),
		func(f *figures) string { return ms(pct(f.ready, 50)) + " / " + ms(pct(f.ready, 99)) },
		func(f *figures) float64 { return float64(pct(f.ready, 99)) }, "p99 ≤ 50 ms", func(f *figures) bool { return pct(f.ready, 99) <= 50*time.Millisecond })
	row(fmt.Sprintf("%d held requests released at once → answered, p50 / p99", c.release),
		func(f *figures) string { return ms(pct(f.rel, 50)) + " / " + ms(pct(f.rel, 99)) },
		func(f *figures) float64 { return float64(pct(f.rel, 99)) }, "—", func(*figures) bool { return true })
	row(fmt.Sprintf("activator RSS idle → holding %d requests", c.hold),
		func(f *figures) string { return fmt.Sprintf("%.1f → %.1f MiB", f.idleRSS, f.heldRSS) },
		func(f *figures) float64 { return f.heldRSS }, "≤ 100 MiB", func(f *figures) bool { return f.heldRSS <= 100 })
	row("memory per held request (RSS growth ÷ held)",
		func(f *figures) string { return fmt.Sprintf("%.2f KiB", (f.heldRSS-f.idleRSS)*1024/float64(c.hold)) },
		func(f *figures) float64 { return f.heldRSS - f.idleRSS }, "—", func(*figures) bool { return true })
	row(fmt.Sprintf("first held request → wake signal at holdpush server (%d trials), p50 / p99", c.wakes),
		func(f *figures) string { return ms(pct(f.wake, 50)) + " / " + ms(pct(f.wake, 99)) },
		func(f *figures) float64 { return float64(pct(f.wake, 99)) }, "p99 ≤ 20 ms", func(f *figures) bool { return pct(f.wake, 99) <= 20*time.Millisecond })
}

type change struct {
	at   time.Time
	held int64
}

func awaitHeld(ch <-chan change, cond func(int64) bool, timeout time.Duration) (time.Time, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case c := <-ch:
			if cond(c.held) {
				return c.at, nil
			}
		case <-t.C:
			return time.Time{}, errors.New("timed out waiting for the held count")
		}
	}
}

// openHeld opens n connections each sending one request that the activator
// holds, 64 dials at a time.
func openHeld(addr, host string, n int) ([]net.Conn, error) {
	conns := make([]net.Conn, 0, n)
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	req := []byte("GET / HTTP/1.1\r\nHost: " + host + "\r\n\r\n")
	for range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err == nil {
				_, err = c.Write(req)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				return
			}
			conns = append(conns, c)
		})
	}
	wg.Wait()
	if firstErr != nil {
		return conns, fmt.Errorf("open %d held requests: %w", n, firstErr)
	}
	return conns, nil
}

func wrkRPS(d time.Duration, addr, host string) (float64, error) {
	args := []string{"-t2", "-c64", "-d" + d.String(), "--timeout", "5s"}
	if host != "" {
		args = append(args, "-H", "Host: "+host)
	}
	args = append(args, "http://"+addr+"/")
	ctx, cancel := context.WithTimeout(context.Background(), d+30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "wrk", args...).Output()
	if err != nil {
		return 0, fmt.Errorf("wrk %v: %w", args, err)
	}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	rps, non2xx := 0.0, 0
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && f[0] == "Requests/sec:" {
			rps, _ = strconv.ParseFloat(f[1], 64)
		}
		if len(f) >= 4 && f[0] == "Non-2xx" {
			non2xx, _ = strconv.Atoi(f[len(f)-1])
		}
	}
	if rps == 0 || non2xx > 0 {
		return 0, fmt.Errorf("wrk %v: %d non-2xx or no rate:\n%s", args, non2xx, out)
	}
	return rps, nil
}

func rssMiB(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseFloat(f[1], 64)
			return kb / 1024, err
		}
	}
	return 0, errors.New("no VmRSS")
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

func pct(v []time.Duration, p int) time.Duration {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[min(max(i-1, 0), len(s)-1)]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }
