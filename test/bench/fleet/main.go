package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/ebb-dev/ebb/test/cluster"
	"github.com/ebb-dev/ebb/test/e2e/install"
	"github.com/ebb-dev/ebb/test/fleet"
)

type options struct {
	sizes               []int
	idle                time.Duration
	warm, wakes, spaces int
	workers             int
	converge            time.Duration
	seed                uint64
	smoke               bool
}

func main() {
	var o options
	sizes := flag.String("n", "10,100,1000", "fleet sizes, cumulative: apps at zero are added up to each in turn (10000 when asked for)")
	flag.DurationVar(&o.idle, "idle", 10*time.Minute, "idle window measured at each size (the reported figures use 10m)")
	flag.IntVar(&o.warm, "warm", 20, "warm apps, one pod each, a request every 100 ms to each through its Service")
	flag.IntVar(&o.wakes, "wakes", 20, "apps woken one at a time, then as many others at once, at each size (at most half the fleet each)")
	flag.IntVar(&o.spaces, "namespaces", 20, "namespaces the apps at zero are spread over")
	flag.IntVar(&o.workers, "workers", 16, "apps created at once")
	flag.DurationVar(&o.converge, "converge-timeout", 15*time.Minute, "how long to wait for every AppRoute routed after the last apply")
	flag.Uint64Var(&o.seed, "seed", 0, "seed of the choice of apps to wake (0: from the clock, printed)")
	flag.BoolVar(&o.smoke, "smoke", false, "every step with tiny sizes, in about a minute: -n 3 -idle 20s -warm 2 -wakes 1 -namespaces 3, and an error if a wake fails")
	flag.Parse()
	if o.smoke {
		*sizes, o.idle, o.warm, o.wakes, o.spaces = "3", 20*time.Second, 2, 1, 3
	}
	var problems []string
	prev := 0
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= prev {
			problems = append(problems, fmt.Sprintf("-n %q: want increasing whole numbers above 0", *sizes))
			break
		}
		o.sizes, prev = append(o.sizes, n), n
	}
	if o.idle <= 0 {
		problems = append(problems, "-idle: want a duration above 0")
	}
	if o.warm < 1 || o.wakes < 1 || o.spaces < 1 || o.workers < 1 {
		problems = append(problems, "-warm, -wakes, -namespaces, -workers: want at least 1")
	}
	if len(problems) > 0 {
		fmt.Fprintln(os.Stderr, "fleet:", strings.Join(problems, "; "))
		os.Exit(2)
	}
	if o.seed == 0 {
		o.seed = uint64(time.Now().UnixNano())
	}
	// client-go's own lines (a watch ended by its context) are not the
	// bench's output.
	klog.SetLogger(logr.Discard())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(1)
	}
}

func say(format string, args ...any) {
	fmt.Printf("%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// result is what one size measured.
type result struct {
	n                  int
	converge           fleet.Convergence
	kedaReady          time.Duration
	costs              []fleet.Cost
	note               string
	rates              map[string]*fleet.ClientRates
	series             map[string]int
	idleSidecar        int
	warmSidecar        int
	each, together     []fleet.Wake
	trafficOK, trafErr int64
}

func run(ctx context.Context, o options) (err error) {
	begin := time.Now()
	say("fleet bench: sizes %v (cumulative), idle window %s, %d warm apps, %d namespaces, seed %d", o.sizes, o.idle, o.warm, o.spaces, o.seed)
	c, err := cluster.Start(ctx, cluster.Options{KEDAMetricsAdapter: true, AuditLog: true, HPASyncPeriod: 15 * time.Second, Logf: say})
	if err != nil {
		return err
	}
	defer c.Stop()
	ebb, err := install.Install(ctx, c, install.Options{Logf: say})
	if err != nil {
		return fmt.Errorf("install ebb from charts/ebb: %w", err)
	}
	apps, err := fleet.New(ctx, c, ebb, "fleet", o.spaces, say)
	if err != nil {
		return err
	}
	apps.Workers = o.workers
	warm, err := fleet.New(ctx, c, ebb, "fleet-warm", 1, say)
	if err != nil {
		return err
	}
	defer func() {
		// A bounded clean-up on its own context: the run's may be done.
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		say("deleting the fleet's namespaces")
		if derr := errors.Join(apps.Delete(cctx, 5*time.Minute), warm.Delete(cctx, 5*time.Minute)); derr != nil {
			say("clean-up: %v", derr)
		}
	}()

	// The warm apps' traffic starts with them: KEDA would take an app
	// with no request to zero.
	tctx, stopTraffic := context.WithCancel(ctx)
	var traffic trafficCounts
	var twg sync.WaitGroup
	defer func() { stopTraffic(); twg.Wait() }()
	warmApps, idleApp, err := startWarm(ctx, warm, o.warm, func(a fleet.App) { twg.Go(func() { traffic.send(tctx, a) }) })
	if err != nil {
		return err
	}

	audit := fleet.NewAudit(c.AuditLogPath)
	rng := rand.New(rand.NewPCG(o.seed, o.seed))
	var results []result
	for _, n := range o.sizes {
		r, err := measure(ctx, o, c, apps, warm, warmApps[0], idleApp, audit, &traffic, rng, n)
		if err != nil {
			return fmt.Errorf("N = %d: %w", n, err)
		}
		results = append(results, r)
		printResult(r, ebb, o)
		if _, _, failed := fleet.Summarize(append(append([]fleet.Wake{}, r.each...), r.together...)); o.smoke && failed > 0 {
			return fmt.Errorf("N = %d: %d wakes not answered 200 or without ebb's phases in status.lastColdStart", n, failed)
		}
	}
	if len(results) > 1 {
		printRatios(results, ebb)
	}
	say("done in %s", time.Since(begin).Round(time.Second))
	return nil
}

// startWarm creates the warm apps (one pod each, min 0 as the README's),
// calling traffic with each, and one idle app whose ScaledObject keeps one
// pod (min 1) and which gets no request, and waits for their pods and
// AppRoutes.
func startWarm(ctx context.Context, warm *fleet.Fleet, n int, traffic func(fleet.App)) ([]fleet.App, fleet.App, error) {
	ns := warm.Namespaces[0]
	var apps []fleet.App
	for i := range n {
		a, err := warm.Create(ctx, ns, fmt.Sprintf("warm-%02d", i), 1, 0)
		if err != nil {
			return nil, fleet.App{}, err
		}
		traffic(a)
		apps = append(apps, a)
	}
	idle, err := warm.Create(ctx, ns, "idle-sidecar", 1, 1)
	if err != nil {
		return nil, fleet.App{}, err
	}
	all := append(append([]fleet.App{}, apps...), idle)
	if _, err := warm.WaitRouted(ctx, all, time.Now(), 3*time.Minute, false); err != nil {
		return nil, fleet.App{}, err
	}
	if err := pollEvery(ctx, time.Second, 3*time.Minute, "the warm apps' pods ready", func(ctx context.Context) (bool, error) {
		ds, err := warm.Client.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, d := range ds.Items {
			if d.Status.ReadyReplicas < 1 {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		return nil, fleet.App{}, err
	}
	warm.Logf("%d warm apps and one idle app with a pod ready in %s", n, ns)
	return apps, idle, nil
}

// trafficCounts counts the warm apps' requests.
type trafficCounts struct{ ok, failed atomic.Int64 }

// send GETs the app through its Service every 100 ms until ctx ends.
func (t *trafficCounts) send(ctx context.Context, a fleet.App) {
	client := &http.Client{Timeout: 5 * time.Second}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		r := install.Get(ctx, client, a.URL, a.Host)
		if r.Err == nil && r.Status == http.StatusOK {
			t.ok.Add(1)
		} else if ctx.Err() == nil {
			t.failed.Add(1)
		}
	}
}

// pollEvery calls cond every interval until it returns true, an error, or
// timeout passes.
func pollEvery(ctx context.Context, interval, timeout time.Duration, what string, cond func(context.Context) (bool, error)) error {
	if err := wait.PollUntilContextTimeout(ctx, interval, timeout, true, cond); err != nil {
		return fmt.Errorf("wait for %s: %w", what, err)
	}
	return nil
}

func measure(ctx context.Context, o options, c *cluster.Cluster, apps, warm *fleet.Fleet, warmApp, idleApp fleet.App, audit *fleet.Audit, traffic *trafficCounts, rng *rand.Rand, n int) (r result, err error) {
	r = result{n: n}
	add := n - len(apps.Apps)
	say("N = %d: creating %d more apps at zero (Service, Deployment at 0, ScaledObject) over %d namespaces, %d at a time", n, add, len(apps.Namespaces), apps.Workers)
	created := time.Now()
	_, last, err := apps.Add(ctx, add)
	if err != nil {
		return r, err
	}
	say("N = %d: %d apps applied in %s; waiting for every AppRoute", n, add, last.Sub(created).Round(time.Second))
	// A size whose routes, KEDA or wakes do not settle is still measured:
	// its table says what did not (a failed run would print nothing).
	var notes []string
	if r.converge, err = apps.WaitRouted(ctx, apps.Apps, last, o.converge, true); err != nil {
		if ctx.Err() != nil {
			return r, err
		}
		notes = append(notes, err.Error())
	}
	say("N = %d: routed after %s, Idle after %s", n, orNot(r.converge.Routed), orNot(r.converge.Idle))
	// KEDA's own work on the new ScaledObjects (an HPA each) ends before
	// the window too.
	if r.kedaReady, err = apps.WaitKEDAReady(ctx, apps.Apps, last, o.converge); err != nil {
		if ctx.Err() != nil {
			return r, err
		}
		notes = append(notes, err.Error())
	}
	say("N = %d: KEDA Ready on every ScaledObject %s after the last apply", n, orNot(r.kedaReady))
	// Apps woken at the size before go back to zero first: the window is
	// for a fleet where nothing happens.
	if err := apps.WaitAtZero(ctx, nil, 5*time.Minute); err != nil {
		if ctx.Err() != nil {
			return r, err
		}
		notes = append(notes, err.Error())
	}
	defer func() {
		if r.note != "" {
			notes = append(notes, r.note)
		}
		r.note = strings.Join(notes, "; ")
	}()
	if err := audit.Advance(); err != nil {
		return r, err
	}
	a, err := apps.SampleUsage(ctx)
	if err != nil {
		return r, err
	}
	ok0, failed0 := traffic.ok.Load(), traffic.failed.Load()
	say("N = %d: idle window of %s begins", n, o.idle)
	end := a.At.Add(o.idle)
	for time.Until(end) > 0 {
		select {
		case <-ctx.Done():
			return r, ctx.Err()
		case <-time.After(min(time.Minute, time.Until(end))):
		}
		if left := time.Until(end); left > time.Second {
			say("N = %d: idle, %s left", n, left.Round(time.Second))
		}
	}
	b, err := apps.SampleUsage(ctx)
	if err != nil {
		return r, err
	}
	r.trafficOK, r.trafErr = traffic.ok.Load()-ok0, traffic.failed.Load()-failed0
	r.costs, r.note = fleet.Costs(a, b)
	if r.series, err = apps.ComponentSeries(ctx); err != nil {
		return r, err
	}
	if r.idleSidecar, err = warm.SidecarSeries(ctx, idleApp.Namespace, idleApp.Name); err != nil {
		return r, err
	}
	if r.warmSidecar, err = warm.SidecarSeries(ctx, warmApp.Namespace, warmApp.Name); err != nil {
		return r, err
	}
	// Requests received before the window's end are logged once answered.
	time.Sleep(3 * time.Second)
	if err := audit.Advance(); err != nil {
		return r, err
	}
	r.rates = audit.Window(a.At, b.At)

	k := min(o.wakes, len(apps.Apps)/2)
	pick := rng.Perm(len(apps.Apps))
	var each, together []fleet.App
	for _, i := range pick[:k] {
		each = append(each, apps.Apps[i])
	}
	for _, i := range pick[k : 2*k] {
		together = append(together, apps.Apps[i])
	}
	say("N = %d: waking %d random apps one at a time", n, k)
	r.each = apps.WakeEach(ctx, each)
	say("N = %d: waking %d other random apps at once", n, k)
	r.together = apps.WakeTogether(ctx, together)
	for _, w := range append(append([]fleet.Wake{}, r.each...), r.together...) {
		if !w.OK() {
			say("N = %d: wake %s", n, w)
		}
	}
	return r, nil
}

func orNot(d time.Duration) string {
	if d == 0 {
		return "not within the timeout"
	}
	return d.Round(time.Second).String()
}

// clientOf maps a row of the table to the audit log's client of it.
func clientOf(ebb *install.Release, name string, rates map[string]*fleet.ClientRates) *fleet.ClientRates {
	var key string
	switch name {
	case "webhook", "activator", "scaler", "federation":
		key = "system:serviceaccount:" + ebb.Namespace + ":" + ebb.Fullname + "-" + name
	default:
		for k := range rates {
			if strings.Contains(k, "["+name) || (name == "keda-operator" && strings.Contains(k, "[keda") && !strings.Contains(k, "adapter")) {
				key = k
			}
		}
	}
	if r := rates[key]; r != nil {
		return r
	}
	return &fleet.ClientRates{Seconds: 1, Wrote: map[string]int{}}
}

func printResult(r result, ebb *install.Release, o options) {
	var b strings.Builder
	fmt.Fprintf(&b, "\n### N = %d apps at zero (+ %d warm, 1 idle with a pod), idle window %s\n\n", r.n, o.warm, o.idle)
	fmt.Fprintf(&b, "| component | pods | CPU (cores, avg) | RSS (MiB) | API requests/s | writes/s (of which Lease) | watches open | series |\n|---|---|---|---|---|---|---|---|\n")
	for _, cost := range r.costs {
		cr := clientOf(ebb, cost.Name, r.rates)
		series := "–"
		if s, ok := r.series[cost.Name]; ok {
			series = strconv.Itoa(s) + " per pod"
		}
		pods := "host process"
		if cost.Replicas > 0 {
			pods = strconv.Itoa(cost.Replicas)
		}
		fmt.Fprintf(&b, "| %s | %s | %.4f | %.1f | %.2f | %.3f (%.3f) | %d | %s |\n", cost.Name, pods, cost.Cores, float64(cost.RSS)/(1<<20),
			cr.PerSecond(cr.Requests), cr.PerSecond(cr.Writes), cr.PerSecond(cr.LeaseWrites), cr.OpenWatches, series)
	}
	cm := clientOf(ebb, "kube-controller-manager", r.rates)
	fmt.Fprintf(&b, "| kube-controller-manager | host process | | | %.2f | %.3f (%.3f) | %d | |\n", cm.PerSecond(cm.Requests), cm.PerSecond(cm.Writes), cm.PerSecond(cm.LeaseWrites), cm.OpenWatches)
	fmt.Fprintf(&b, "| sidecar (idle, never served) | | | | | | | %d |\n", r.idleSidecar)
	fmt.Fprintf(&b, "| sidecar (warm, serving) | | | | | | | %d |\n", r.warmSidecar)
	ebbEach, totalEach, failedEach := fleet.Summarize(r.each)
	ebbTog, totalTog, failedTog := fleet.Summarize(r.together)
	fmt.Fprintf(&b, "\n| figure | value |\n|---|---|\n")
	fmt.Fprintf(&b, "| last apply → every AppRoute Ready, Admitted, Propagated, ScaledByKEDA | %s |\n", orNot(r.converge.Routed))
	fmt.Fprintf(&b, "| last apply → every AppRoute Idle | %s |\n", orNot(r.converge.Idle))
	fmt.Fprintf(&b, "| last apply → KEDA Ready on every ScaledObject | %s |\n", orNot(r.kedaReady))
	fmt.Fprintf(&b, "| %d woken one at a time: ebb's part, median (max) | %s |\n", len(r.each), ebbEach)
	fmt.Fprintf(&b, "| %d woken one at a time: KEDA's Scaled phase (push → Deployment scaled; not in ebb's part), median (max) | %s |\n", len(r.each), fleet.Phase(r.each, "Scaled"))
	fmt.Fprintf(&b, "| %d woken one at a time: client's total, median (max) | %s |\n", len(r.each), totalEach)
	fmt.Fprintf(&b, "| %d woken at once: ebb's part, median (max) | %s |\n", len(r.together), ebbTog)
	fmt.Fprintf(&b, "| %d woken at once: KEDA's Scaled phase (not in ebb's part), median (max) | %s |\n", len(r.together), fleet.Phase(r.together, "Scaled"))
	fmt.Fprintf(&b, "| %d woken at once: client's total, median (max) | %s |\n", len(r.together), totalTog)
	fmt.Fprintf(&b, "| wakes not answered 200 or without ebb's phases in status.lastColdStart | %d |\n", failedEach+failedTog)
	fmt.Fprintf(&b, "| warm traffic in the window: answered 200 / not | %d / %d |\n", r.trafficOK, r.trafErr)
	fmt.Fprintf(&b, "\nEvery API client in the window (audit log; a watch counts once, when it starts):\n\n| client | requests/s | writes/s | watches started | watches open | writes |\n|---|---|---|---|---|---|\n")
	for _, cr := range fleet.Sorted(r.rates) {
		fmt.Fprintf(&b, "| %s | %.2f | %.3f | %d | %d | %s |\n", cr.Client, cr.PerSecond(cr.Requests), cr.PerSecond(cr.Writes), cr.Watches, cr.OpenWatches, cr.WroteSummary())
	}
	if r.note != "" {
		fmt.Fprintf(&b, "\nnote: %s\n", r.note)
	}
	fmt.Print(b.String())
}

func printRatios(rs []result, ebb *install.Release) {
	type pair struct{ a, b int }
	var pairs []pair
	for i := 1; i < len(rs); i++ {
		pairs = append(pairs, pair{i - 1, i})
	}
	if len(rs) > 2 {
		pairs = append(pairs, pair{0, len(rs) - 1})
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n### Ratios between sizes\n\n| figure |")
	for _, p := range pairs {
		fmt.Fprintf(&b, " %d ÷ %d |", rs[p.b].n, rs[p.a].n)
	}
	fmt.Fprintf(&b, "\n|---|%s\n", strings.Repeat("---|", len(pairs)))
	row := func(name string, v func(r result) float64) {
		fmt.Fprintf(&b, "| %s |", name)
		for _, p := range pairs {
			x, y := v(rs[p.a]), v(rs[p.b])
			if x == 0 {
				fmt.Fprintf(&b, " %s |", map[bool]string{true: "0 → 0", false: fmt.Sprintf("0 → %.3g", y)}[y == 0])
				continue
			}
			fmt.Fprintf(&b, " %.2f |", y/x)
		}
		b.WriteString("\n")
	}
	var names []string
	for _, cost := range rs[0].costs {
		names = append(names, cost.Name)
	}
	sort.Strings(names)
	for _, name := range names {
		row(name+" CPU", func(r result) float64 {
			for _, cost := range r.costs {
				if cost.Name == name {
					return cost.Cores
				}
			}
			return 0
		})
		row(name+" RSS", func(r result) float64 {
			for _, cost := range r.costs {
				if cost.Name == name {
					return float64(cost.RSS)
				}
			}
			return 0
		})
		row(name+" API requests/s", func(r result) float64 {
			cr := clientOf(ebb, name, r.rates)
			return cr.PerSecond(cr.Requests)
		})
	}
	row("last apply → routed", func(r result) float64 { return r.converge.Routed.Seconds() })
	row("last apply → KEDA Ready", func(r result) float64 { return r.kedaReady.Seconds() })
	row("ebb's part, one at a time (median)", func(r result) float64 { e, _, _ := fleet.Summarize(r.each); return e.Median.Seconds() })
	row("ebb's part, at once (median)", func(r result) float64 { e, _, _ := fleet.Summarize(r.together); return e.Median.Seconds() })
	row("KEDA's Scaled phase, one at a time (median)", func(r result) float64 { return fleet.Phase(r.each, "Scaled").Median.Seconds() })
	row("client's total, one at a time (median)", func(r result) float64 { _, t, _ := fleet.Summarize(r.each); return t.Median.Seconds() })
	fmt.Print(b.String())
}
