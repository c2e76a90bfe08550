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
	port := flag.Int("port", 19500, "first loopback port used")
	smoke := flag.Bool("smoke", false, "check that the bench still runs end to end, in seconds: -duration 1s -rounds 1 -trials 2 -wakes 10 -hold 200")
	flag.Parse()
	if *smoke {
		*duration, *rounds, *trials, *wakes, *hold = time.Second, 1, 2, 10, 200
	}
	if *duration <= 0 || *duration > time.Minute || *rounds < 1 || *rounds > 9 || *trials < 1 || *trials > 200 || *wakes < 1 || *wakes > 2000 || *hold < 1 || *hold > 15000 {
		log.Fatal("out of bounds: 0 < -duration <= 1m, -rounds 1..9, -trials 1..200, -wakes 1..2000, -hold 1..15000")
	}
	if err := run(*duration, *rounds, *trials, *wakes, *hold, *port); err != nil {
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
	dp := proxy.NewRouter(proxy.RouterOptions{Pusher: push, MaxHeld: 50000, ColdStartTimeout: 5 * time.Minute})
	var routes []routing.Route[proxy.AppConfig]
	for _, a := range cfg.Apps {
		k := routing.Key{Namespace: "bench", Name: a.Name}
		routes = append(routes, routing.Route[proxy.AppConfig]{Key: k, Hosts: []string{a.Host}, Value: proxy.AppConfig{QueueSize: a.QueueSize}})
		dp.SetEndpoints(k, a.Endpoints)
	}
	dp.SetRoutes(routes, nil)
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
	srv := &http.Server{Handler: dp, ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 64 << 10, IdleTimeout: 120 * time.Second}
	return proxy.NewServer(dp, srv).Serve(ln)
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

func run(duration time.Duration, rounds, trials, wakes, hold, base int) error {
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
	addr := func(p int) string { return "127.0.0.1:" + strconv.Itoa(p) }
	appPort, actPort, pushPort := base, base+1, base+2

	// The holdpush server: the scaler's side, recording when counts change.
	changes := make(chan change, 4*hold+16)
	srv := holdpush.NewServer(holdpush.ServerOptions{OnChange: func(app holdpush.App, held int64) {
		if app.Name == "cold" {
			select {
			case changes <- change{time.Now(), held}:
			default:
			}
		}
	}})
	gs := grpc.NewServer()
	srv.Register(gs)
	ln, err := net.Listen("tcp", addr(pushPort))
	if err != nil {
		return err
	}
	go gs.Serve(ln)
	defer gs.Stop()

	if _, err := ps.start(filepath.Join(dir, "ebb-test-app"), "--listen="+addr(appPort)); err != nil {
		return err
	}
	cfg := childConfig{Listen: addr(actPort), Scaler: addr(pushPort), Apps: []childApp{
		{Name: "warm", Host: "warm.test", Endpoints: []proxy.Endpoint{{Addr: addr(appPort), Ready: true}}},
		{Name: "cold", Host: "cold.test", QueueSize: hold},
	}}
	probeBase := base + 10
	for i := range trials {
		d, a := probeBase+3*i, probeBase+3*i+1
		cfg.Apps = append(cfg.Apps, childApp{Name: fmt.Sprintf("probe-%d", i), Host: fmt.Sprintf("probe-%d.test", i),
			Endpoints: []proxy.Endpoint{{Addr: addr(d), AdminAddr: addr(a)}}})
	}
	cfgFile, err := os.CreateTemp("", "ebb-bench-activator-*.json")
	if err != nil {
		return err
	}
	defer os.Remove(cfgFile.Name())
	if err := json.NewEncoder(cfgFile).Encode(cfg); err != nil {
		return err
	}
	cfgFile.Close()
	act, err := ps.start(self, "child", cfgFile.Name())
	if err != nil {
		return err
	}
	if err := waitHTTP("http://"+addr(appPort)+"/", 200, 10*time.Second); err != nil {
		return err
	}
	if err := waitHTTP("http://"+addr(actPort)+"/", 404, 10*time.Second); err != nil {
		return err
	}

	// 1. Warm forwarding ÷ direct, interleaved rounds, medians.
	var direct, through []float64
	for range rounds {
		r, err := wrkRPS(duration, addr(appPort), "")
		if err != nil {
			return err
		}
		direct = append(direct, r)
		r, err = wrkRPS(duration, addr(actPort), "warm.test")
		if err != nil {
			return err
		}
		through = append(through, r)
	}
	dMed, tMed := median(direct), median(through)

	// 2. First held request → wake signal at the holdpush server.
	// Let the push stream connect first.
	time.Sleep(300 * time.Millisecond)
	var wakeLat []time.Duration
	for range wakes {
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr(actPort)+"/", nil)
		req.Host = "cold.test"
		t0 := time.Now()
		go func() {
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
		got, err := awaitHeld(changes, func(n int64) bool { return n >= 1 }, 5*time.Second)
		if err != nil {
			cancel()
			return fmt.Errorf("wake signal: %w", err)
		}
		wakeLat = append(wakeLat, got.Sub(t0))
		cancel()
		if _, err := awaitHeld(changes, func(n int64) bool { return n == 0 }, 5*time.Second); err != nil {
			return fmt.Errorf("held back to 0 after the client left: %w", err)
		}
	}

	// 3. Sidecar ready → first held request answered.
	var readyLat []time.Duration
	for i := range trials {
		d, a, u := probeBase+3*i, probeBase+3*i+1, probeBase+3*i+2
		sc, err := ps.start(filepath.Join(dir, "ebb-sidecar"), "--listen="+addr(d), "--admin-listen="+addr(a), "--upstream="+addr(u), "--log-level=error")
		if err != nil {
			return err
		}
		if err := waitHTTP("http://"+addr(a)+"/ready", 503, 5*time.Second); err != nil {
			return err
		}
		answered := make(chan time.Time, 1)
		go func() {
			req, _ := http.NewRequest(http.MethodGet, "http://"+addr(actPort)+"/", nil)
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
		// When did the sidecar turn ready? Poll its /ready every 1 ms.
		var readyAt time.Time
		c := &http.Client{Timeout: 100 * time.Millisecond}
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			if resp, err := c.Get("http://" + addr(a) + "/ready"); err == nil {
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
			readyLat = append(readyLat, max(0, at.Sub(readyAt)))
		case <-time.After(10 * time.Second):
			return fmt.Errorf("trial %d: held request not answered within 10s of the sidecar turning ready", i)
		}
		stop(appCmd)
		stop(sc)
	}

	// 4. RSS holding `hold` requests at once.
	idleRSS, _ := rssMiB(act.Process.Pid)
	conns, err := openHeld(addr(actPort), "cold.test", hold)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	if err != nil {
		return err
	}
	if _, err := awaitHeld(changes, func(n int64) bool { return n == int64(hold) }, 30*time.Second); err != nil {
		return fmt.Errorf("holding %d: %w (activator holds %d)", hold, err, srv.Held(holdpush.App{Namespace: "bench", Name: "cold"}))
	}
	time.Sleep(500 * time.Millisecond)
	act.Process.Signal(syscall.SIGUSR1)
	time.Sleep(100 * time.Millisecond)
	heldRSS, err := rssMiB(act.Process.Pid)
	if err != nil {
		return err
	}

	ratio := tMed / dMed
	wp50, wp99 := pct(wakeLat, 50), pct(wakeLat, 99)
	rp50, rp99 := pct(readyLat, 50), pct(readyLat, 99)
	ok := func(b bool) string {
		if b {
			return "yes"
		}
		return "**no**"
	}
	fmt.Printf("\n### Activator (%d CPUs, wrk c=64 %s × %d rounds, median)\n\n", runtimeCPUs(), duration, rounds)
	fmt.Println("| figure | measured | target | met |")
	fmt.Println("|---|---|---|---|")
	fmt.Printf("| app direct | %.0f req/s | — | — |\n", dMed)
	fmt.Printf("| warm, through the activator | %.0f req/s | — | — |\n", tMed)
	fmt.Printf("| warm through ÷ direct (c=64) | %.2f | ≥ 0.40 | %s |\n", ratio, ok(ratio >= 0.40))
	fmt.Printf("| sidecar ready → held request answered (%d trials) | p50 %s, p99 %s | p99 ≤ 50 ms | %s |\n", len(readyLat), ms(rp50), ms(rp99), ok(rp99 <= 50*time.Millisecond))
	fmt.Printf("| activator RSS idle → holding %d requests | %.1f → %.1f MiB | ≤ 100 MiB | %s |\n", hold, idleRSS, heldRSS, ok(heldRSS <= 100))
	fmt.Printf("| first held request → wake signal at holdpush server (%d trials) | p50 %s, p99 %s | p99 ≤ 20 ms | %s |\n", len(wakeLat), ms(wp50), ms(wp99), ok(wp99 <= 20*time.Millisecond))
	return nil
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
