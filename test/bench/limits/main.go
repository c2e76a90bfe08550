package main

import (
	"context"
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
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"
)

type options struct {
	duration    time.Duration // of each open-loop run
	wrkDuration time.Duration
	rounds      int
	rate        int
	conns       int
	port        int
	values      string
	smoke       bool
}

func main() {
	var o options
	flag.DurationVar(&o.duration, "duration", 2*time.Second, "length of each open-loop run at -rate, per target per round")
	flag.DurationVar(&o.wrkDuration, "wrk-duration", 3*time.Second, "length of each wrk run at the throughput limit, per target per round (whole seconds)")
	flag.IntVar(&o.rounds, "rounds", 5, "rounds; each runs every target once, in rotated order; medians over rounds are reported")
	flag.IntVar(&o.rate, "rate", 500, "requests per second of the open-loop runs")
	flag.IntVar(&o.conns, "c", 64, "wrk connections")
	flag.IntVar(&o.port, "port", 19480, "first loopback port: the app, then one per sidecar (their admin ports 100 above)")
	flag.StringVar(&o.values, "values", "charts/ebb/values.yaml", "the chart's values, read for sidecar.resources")
	flag.BoolVar(&o.smoke, "smoke", false, "check that the bench still runs end to end, in seconds: -duration 1s -wrk-duration 1s -rounds 1 -rate 50, and an error if a request failed")
	flag.Parse()
	if o.smoke {
		o.duration, o.wrkDuration, o.rounds, o.rate = time.Second, time.Second, 1, 50
	}
	if err := o.validate(); err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, o)
	stop()
	if err != nil {
		log.Fatal(err)
	}
}

// validate returns every problem with the flags at once.
func (o options) validate() error {
	var errs []error
	if o.duration < time.Second || o.duration > time.Minute {
		errs = append(errs, errors.New("-duration: want 1s to 1m"))
	}
	if o.wrkDuration < time.Second || o.wrkDuration > 30*time.Second || o.wrkDuration%time.Second != 0 {
		errs = append(errs, errors.New("-wrk-duration: want whole seconds, 1s to 30s"))
	}
	if o.rounds < 1 || o.rounds > 15 {
		errs = append(errs, errors.New("-rounds: want 1 to 15"))
	}
	if o.rate < 10 || o.rate > 5000 {
		errs = append(errs, errors.New("-rate: want 10 to 5000"))
	}
	if o.conns < 1 || o.conns > 1024 {
		errs = append(errs, errors.New("-c: want 1 to 1024"))
	}
	if o.port < 1024 || o.port > 65000 {
		errs = append(errs, errors.New("-port: want 1024 to 65000"))
	}
	return errors.Join(errs...)
}

// cpuLimits are the CPU limits tried on top of the chart's requests.
var cpuLimits = []string{"100m", "250m", "1000m"}

// target is the app direct or a sidecar in front of it, under one
// configuration of resources.
type target struct {
	name   string
	port   int
	res    corev1.ResourceRequirements
	cg     *cgroup // nil: direct
	pid    int     // the sidecar's; 0: direct
	client *http.Client
	runs   []sample // one per round
}

// sample is what one round measured of a target.
type sample struct {
	open            openResult
	wrk             wrkResult
	useOpen, useWrk usage // the sidecar's, during each
}

func run(ctx context.Context, o options) (err error) {
	start := time.Now()
	if err := preflight(); err != nil {
		return err
	}
	chart, err := chartResources(o.values)
	if err != nil {
		return err
	}
	targets := newTargets(chart, o.port)
	if err := checkFree(targets); err != nil {
		return err
	}
	h, err := openHierarchy()
	if err != nil {
		return err
	}
	var cgs []cgroup
	defer func() { err = errors.Join(err, h.remove(cgs)) }()
	for _, t := range targets[1:] {
		cg, err := h.newCgroup(t.name, kubeletValues(t.res))
		cgs = append(cgs, cg)
		if err != nil {
			return err
		}
		t.cg = &cg
	}
	var procs []*proc
	defer func() { stopAll(procs) }()
	procs, err = startServers(ctx, targets)
	if err != nil {
		return err
	}
	for _, t := range targets {
		t.client = newClient()
		defer t.client.CloseIdleConnections()
	}
	load := []float64{loadavg()}
	if err := measure(ctx, o, targets, &load); err != nil {
		return err
	}
	load = append(load, loadavg())
	return report(o, h, chart, targets, load, time.Since(start))
}

func preflight() error {
	var errs []error
	if _, err := os.Stat("go.mod"); err != nil {
		errs = append(errs, errors.New("run from the module root (go run ./test/bench/limits)"))
	}
	for _, bin := range []string{"bin/ebb-sidecar", "bin/ebb-test-app"} {
		if _, err := os.Stat(bin); err != nil {
			errs = append(errs, fmt.Errorf("%s is needed (make build): %w", bin, err))
		}
	}
	if _, err := exec.LookPath("wrk"); err != nil {
		errs = append(errs, fmt.Errorf("wrk is needed: %w", err))
	}
	if os.Geteuid() != 0 {
		errs = append(errs, errors.New("root is needed to make cgroups"))
	}
	return errors.Join(errs...)
}

// chartResources reads sidecar.resources from the chart's values.
func chartResources(path string) (corev1.ResourceRequirements, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return corev1.ResourceRequirements{}, fmt.Errorf("chart values: %w", err)
	}
	var v struct {
		Sidecar struct {
			Resources corev1.ResourceRequirements `json:"resources"`
		} `json:"sidecar"`
	}
	if err := yaml.Unmarshal(b, &v); err != nil {
		return corev1.ResourceRequirements{}, fmt.Errorf("chart values %s: %w", path, err)
	}
	return v.Sidecar.Resources, nil
}

// newTargets is direct, then the sidecar with no resources, with the
// chart's and with the chart's plus each CPU limit, on consecutive ports.
func newTargets(chart corev1.ResourceRequirements, port int) []*target {
	ts := []*target{{name: "direct", port: port}}
	add := func(name string, r corev1.ResourceRequirements) {
		ts = append(ts, &target{name: name, port: port + len(ts), res: r})
	}
	add("none", corev1.ResourceRequirements{})
	add("chart", chart)
	for _, l := range cpuLimits {
		r := *chart.DeepCopy()
		if r.Limits == nil {
			r.Limits = corev1.ResourceList{}
		}
		r.Limits[corev1.ResourceCPU] = resource.MustParse(l)
		add("cpu-limit-"+l, r)
	}
	return ts
}

func (t *target) url() string { return fmt.Sprintf("http://127.0.0.1:%d/", t.port) }

func checkFree(targets []*target) error {
	var errs []error
	for _, t := range targets {
		for _, port := range []int{t.port, t.port + 100} {
			ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
			if err != nil {
				errs = append(errs, err)
				continue
			}
			ln.Close()
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("ports in use (another run? -port picks others): %w", errors.Join(errs...))
	}
	return nil
}

// enterCgroup writes the shell's pid into each cgroup.procs file named
// before "--", then execs the rest: the sidecar is in its cgroups from its
// first instruction (the Go runtime reads its CPU limit at start).
const enterCgroup = `while [ "$1" != -- ]; do echo $$ > "$1" || exit 1; shift; done; shift; exec "$@"`

// startServers starts the app on targets[0]'s port and a sidecar in front
// of it for each other target, in its cgroup, and waits for them to answer.
func startServers(ctx context.Context, targets []*target) ([]*proc, error) {
	app := fmt.Sprintf("127.0.0.1:%d", targets[0].port)
	p, err := startProc("app", "bin/ebb-test-app", "--listen", app)
	if err != nil {
		return nil, err
	}
	procs := []*proc{p}
	if err := p.waitHTTP(ctx, targets[0].url()); err != nil {
		return procs, err
	}
	for _, t := range targets[1:] {
		argv := append([]string{"/bin/sh", "-c", enterCgroup, "sh"}, t.cg.procsFiles()...)
		argv = append(argv, "--", "bin/ebb-sidecar", "--listen", fmt.Sprintf("127.0.0.1:%d", t.port),
			"--admin-listen", fmt.Sprintf("127.0.0.1:%d", t.port+100), "--upstream", app, "--log-level", "error")
		p, err := startProc("sidecar "+t.name, argv...)
		if err != nil {
			return procs, err
		}
		procs = append(procs, p)
	}
	for i, t := range targets[1:] {
		if err := procs[i+1].waitHTTP(ctx, t.url()); err != nil {
			return procs, err
		}
		t.pid = procs[i+1].cmd.Process.Pid
	}
	return procs, nil
}

// sliceLen is how long a target runs at the fixed rate before the next one
// takes over: within a round the targets' open-loop runs are interleaved in
// slices this long, so that a burst of other work on the machine falls on
// them alike.
const sliceLen = 500 * time.Millisecond

// measure warms every target up and runs the rounds, the targets' order
// rotated every round. load collects the load average as it goes.
func measure(ctx context.Context, o options, targets []*target, load *[]float64) error {
	for _, t := range targets { // connections opened, code paged in
		for range 100 {
			if err := get(ctx, t.client, t.url()); err != nil {
				return fmt.Errorf("warm up %s: %w", t.name, err)
			}
		}
	}
	for r := range o.rounds {
		for _, t := range targets {
			t.runs = append(t.runs, sample{})
		}
		order := append(slices.Clone(targets[r%len(targets):]), targets[:r%len(targets)]...)
		if err := round(ctx, o, order, r, load); err != nil {
			return err
		}
	}
	return nil
}

// round r: the targets at the fixed rate, taking turns in slices, then each
// at its throughput limit.
func round(ctx context.Context, o options, order []*target, r int, load *[]float64) error {
	nSlices := max(1, int(o.duration/sliceLen))
	open := make(map[*target]*openRun)
	for _, t := range order {
		open[t] = &openRun{}
	}
	for range nSlices {
		for _, t := range order {
			used, err := t.during(func() error {
				return openLoop(ctx, t.client, t.url(), o.rate, o.duration/time.Duration(nSlices), open[t])
			})
			if err != nil {
				return err
			}
			t.runs[r].useOpen = t.runs[r].useOpen.add(used)
		}
		*load = append(*load, loadavg())
	}
	for _, t := range order {
		s := &t.runs[r]
		s.open = open[t].result()
		fmt.Fprintf(os.Stderr, "round %d  %4d RPS  %-15s p50 %6.3f ms  p99 %7.3f ms  max %7.1f ms  errors %d\n",
			r+1, o.rate, t.name, ms(s.open.p50), ms(s.open.p99), ms(s.open.max), s.open.errors)
	}
	for _, t := range order {
		s := &t.runs[r]
		var err error
		s.useWrk, err = t.during(func() (err error) {
			s.wrk, err = runWrk(ctx, t.url(), o.conns, o.wrkDuration)
			return err
		})
		if err != nil {
			return err
		}
		*load = append(*load, loadavg())
		fmt.Fprintf(os.Stderr, "round %d  c=%-6d  %-15s %8.0f req/s  p50 %6.2f ms  p99 %7.2f ms  errors %d\n",
			r+1, o.conns, t.name, s.wrk.rps, ms(s.wrk.p50), ms(s.wrk.p99), s.wrk.errors)
	}
	return nil
}

// usage is a sidecar's CPU time and its cgroup's CFS throttling.
type usage struct {
	cpu time.Duration
	thr throttling
}

func (u usage) add(v usage) usage { return usage{cpu: u.cpu + v.cpu, thr: u.thr.add(v.thr)} }

func (t *target) usage() (usage, error) {
	if t.cg == nil {
		return usage{}, nil
	}
	cpu, err := cpuTime(t.pid)
	if err != nil {
		return usage{}, fmt.Errorf("sidecar %s: %w", t.name, err)
	}
	thr, err := t.cg.throttling()
	return usage{cpu: cpu, thr: thr}, err
}

// during runs f and returns what the sidecar used meanwhile.
func (t *target) during(f func() error) (usage, error) {
	before, err := t.usage()
	if err != nil {
		return usage{}, err
	}
	if err := f(); err != nil {
		return usage{}, err
	}
	after, err := t.usage()
	return usage{cpu: after.cpu - before.cpu, thr: after.thr.sub(before.thr)}, err
}

// cpuTime is the time pid's threads have run (the first field of each
// one's schedstat, in ns; the Go runtime keeps its threads).
func cpuTime(pid int) (time.Duration, error) {
	files, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(files) == 0 {
		return 0, fmt.Errorf("no threads of pid %d (%v)", pid, err)
	}
	var total time.Duration
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the thread has exited
		}
		var ns int64
		if _, err := fmt.Sscan(string(b), &ns); err != nil {
			return 0, fmt.Errorf("%s: %w", f, err)
		}
		total += time.Duration(ns)
	}
	return total, nil
}

const bound = 2.0 // ms of p99 added at the fixed rate

// report prints the table and the verdict.
func report(o options, h hierarchy, chart corev1.ResourceRequirements, targets []*target, load []float64, took time.Duration) error {
	version := "v1 (cpu: " + h.cpu + ", memory: " + h.mem + ")"
	if h.v2 {
		version = "v2 (" + h.cpu + ")"
	}
	fmt.Printf("\n`go run ./test/bench/limits %s`\n\n", strings.Join(os.Args[1:], " "))
	fmt.Printf("chart %s: sidecar.resources %s. Rounds: %d; per target per round %s open-loop at %d RPS (the targets taking turns in %s slices), then wrk -t1 -c%d -d%s --latency; medians over rounds; %d CPUs; cgroup %s; load average (1 min) %.2f at start, up to %.2f, %.2f at the end; %s in all\n\n",
		o.values, describe(chart), o.rounds, o.duration, o.rate, o.duration/time.Duration(max(1, int(o.duration/sliceLen))), o.conns, o.wrkDuration,
		runtime.NumCPU(), version, load[0], slices.Max(load), load[len(load)-1], took.Round(time.Second))
	fmt.Printf("| config | cpu.shares / CFS quota per 100 ms / memory limit | %d RPS: p50 added | p99 added | max | errors | sidecar CPU | throttled periods | at the limit: req/s | p50 | p99 | sidecar CPU | throttled periods | memory peak |\n", o.rate)
	fmt.Println("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	direct := targets[0]
	for _, t := range targets {
		row, err := t.row(o, direct)
		if err != nil {
			return err
		}
		fmt.Println(row)
	}
	fmt.Println()
	for _, t := range targets {
		for r, s := range t.runs {
			if s.open.errors > 0 {
				fmt.Printf("%s, round %d: %d errors, the first: %s\n", t.name, r+1, s.open.errors, s.open.firstErr)
			}
		}
	}
	verdict(o, chart, targets)
	if o.smoke {
		for _, t := range targets {
			for r, s := range t.runs {
				if s.open.errors > 0 || s.wrk.errors > 0 {
					return fmt.Errorf("smoke: %s, round %d: %d requests failed at %d RPS, %d in wrk's run", t.name, r+1, s.open.errors, o.rate, s.wrk.errors)
				}
			}
		}
	}
	return nil
}

// row is t's line of the table.
func (t *target) row(o options, direct *target) (string, error) {
	var worst time.Duration
	var open, limit usage
	errs, wrkErrs := 0, 0
	for _, s := range t.runs {
		worst = max(worst, s.open.max)
		errs += s.open.errors
		wrkErrs += s.wrk.errors
		open, limit = open.add(s.useOpen), limit.add(s.useWrk)
	}
	rps := fmt.Sprintf("%.0f", t.median(func(s sample) float64 { return s.wrk.rps }))
	if wrkErrs > 0 {
		rps += fmt.Sprintf(" (%d errors)", wrkErrs)
	}
	wrk50 := t.median(func(s sample) float64 { return ms(s.wrk.p50) })
	wrk99 := t.median(func(s sample) float64 { return ms(s.wrk.p99) })
	if t.cg == nil {
		return fmt.Sprintf("| %s | — | %.3f ms (baseline) | %.3f ms (baseline) | %.1f ms | %d | — | — | %s | %.2f ms | %.2f ms | — | — | — |",
			t.name, t.median(func(s sample) float64 { return ms(s.open.p50) }), t.median(func(s sample) float64 { return ms(s.open.p99) }),
			ms(worst), errs, rps, wrk50, wrk99), nil
	}
	peak, err := t.cg.memoryPeak()
	if err != nil {
		return "", err
	}
	rounds := time.Duration(len(t.runs))
	return fmt.Sprintf("| %s | %s | %+.3f ms | %+.3f ms | %.1f ms | %d | %.0fm | %s | %s | %.2f ms | %.2f ms | %.0fm | %s | %.1f MiB |",
		t.name, kubeletValues(t.res), t.added(direct, 50), t.added(direct, 99), ms(worst), errs, millicores(open.cpu, rounds*o.duration), open.thr,
		rps, wrk50, wrk99, millicores(limit.cpu, rounds*o.wrkDuration), limit.thr, float64(peak)/(1<<20)), nil
}

// verdict says whether the chart's resources keep the p99 added at the
// fixed rate within the bound, and which CPU limits do not.
func verdict(o options, chart corev1.ResourceRequirements, targets []*target) {
	direct := targets[0]
	d50, d99 := direct.median(func(s sample) float64 { return ms(s.open.p50) }), direct.median(func(s sample) float64 { return ms(s.open.p99) })
	var lag time.Duration
	errs := 0
	for _, s := range direct.runs {
		lag = max(lag, s.open.lag)
		errs += s.open.errors
	}
	clean := "clean"
	switch {
	case errs > 0:
		clean = "**not clean**: requests failed"
	case d99 > bound:
		clean = fmt.Sprintf("**noisy**: the direct p99 alone is above the %.0f ms bound, so differences of that order are within the machine's noise", bound)
	}
	fmt.Printf("direct at %d RPS: p50 %.3f ms, p99 %.3f ms, %d errors, the generator's latest send %.2f ms behind schedule: %s\n",
		o.rate, d50, d99, errs, ms(lag), clean)
	none := targets[1]
	var keeps string
	var failing, throttled []string
	for _, t := range targets[1:] {
		a99 := t.added(direct, 99)
		ok := a99 <= bound && !slices.ContainsFunc(t.runs, func(s sample) bool { return s.open.errors > 0 })
		figure := fmt.Sprintf("%+.2f ms, %+.2f ms over none", a99, t.added(none, 99))
		switch {
		case t.name == "chart" && ok:
			keeps = fmt.Sprintf("keeps p99 added ≤ %.0f ms at %d RPS (%s)", bound, o.rate, figure)
		case t.name == "chart":
			keeps = fmt.Sprintf("does **not** keep p99 added ≤ %.0f ms at %d RPS (%s)", bound, o.rate, figure)
		case strings.HasPrefix(t.name, "cpu-limit-") && !ok:
			failing = append(failing, fmt.Sprintf("%s (%s)", t.name, figure))
		}
		var thr throttling
		for _, s := range t.runs {
			thr = thr.add(s.useOpen.thr)
		}
		if thr.throttled > 0 {
			throttled = append(throttled, fmt.Sprintf("%s (%s periods)", t.name, thr))
		}
	}
	notKept := "none of " + strings.Join(cpuLimits, ", ")
	if len(failing) > 0 {
		notKept = strings.Join(failing, ", ")
	}
	if len(throttled) == 0 {
		throttled = []string{"none"}
	}
	fmt.Printf("verdict: chart (%s) %s; CPU limits (with the chart's requests) that do not: %s; throttled by CFS at %d RPS: %s\n",
		describe(chart), keeps, notKept, o.rate, strings.Join(throttled, ", "))
}

// added is the median over rounds of t's percentile p (50 or 99) at the
// fixed rate minus base's in the same round, in ms.
func (t *target) added(base *target, p int) float64 {
	pick := func(r openResult) time.Duration {
		if p == 50 {
			return r.p50
		}
		return r.p99
	}
	var d []float64
	for r := range t.runs {
		d = append(d, ms(pick(t.runs[r].open))-ms(pick(base.runs[r].open)))
	}
	return median(d)
}

// median is the median over rounds of f.
func (t *target) median(f func(sample) float64) float64 {
	var v []float64
	for _, s := range t.runs {
		v = append(v, f(s))
	}
	return median(v)
}

func millicores(cpu, wall time.Duration) float64 { return 1000 * cpu.Seconds() / wall.Seconds() }

// String is the share of quota periods that ran out of quota.
func (t throttling) String() string {
	if t.periods == 0 {
		return "—"
	}
	return fmt.Sprintf("%.0f %% of %d", 100*float64(t.throttled)/float64(t.periods), t.periods)
}

// describe is r as the chart spells it.
func describe(r corev1.ResourceRequirements) string {
	list := func(l corev1.ResourceList) string {
		var parts []string
		for _, k := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			if q, ok := l[k]; ok {
				parts = append(parts, fmt.Sprintf("%s %s", k, q.String()))
			}
		}
		return strings.Join(parts, ", ")
	}
	var parts []string
	if s := list(r.Requests); s != "" {
		parts = append(parts, "requests "+s)
	}
	if s := list(r.Limits); s != "" {
		parts = append(parts, "limits "+s)
	}
	if len(parts) == 0 {
		return "no requests or limits"
	}
	return strings.Join(parts, "; ")
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func loadavg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	var l float64
	fmt.Sscan(string(b), &l)
	return l
}

// proc is a server the bench started.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed when it has exited
}

func startProc(name string, argv ...string) (*proc, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stderr = os.Stderr
	// Should the bench die without stopping it, the kernel does.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); close(p.done) }()
	return p, nil
}

// waitHTTP waits up to 10 s for url to answer 200.
func (p *proc) waitHTTP(ctx context.Context, url string) error {
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	deadline := time.Now().Add(10 * time.Second)
	for get(ctx, client, url) != nil {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %s did not answer 200 within 10s", p.name, url)
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited (%s)", p.name, p.cmd.ProcessState)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// stopAll sends SIGTERM to every process and kills those still running
// 5 s later.
func stopAll(procs []*proc) {
	for _, p := range procs {
		p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range procs {
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			p.cmd.Process.Kill()
			<-p.done
		}
	}
}
