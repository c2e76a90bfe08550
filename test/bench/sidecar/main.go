package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

type benchConfig struct {
	duration time.Duration
	rounds   int
	conns    int
	hold     int
	pin      string
	rebuild  bool
	basePort int
	nice     int
	baseline string
	pairs    int
	smoke    bool
}

func main() {
	// Self-exec mode: the httputil.ReverseProxy baseline as its own process.
	if len(os.Args) > 1 && os.Args[1] == "reverseproxy" {
		if err := serveReverseProxy(os.Args[2], os.Args[3]); err != nil {
			log.Fatal(err)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "tcpforward" {
		if err := serveTCPForward(os.Args[2], os.Args[3]); err != nil {
			log.Fatal(err)
		}
		return
	}
	var c benchConfig
	flag.DurationVar(&c.duration, "duration", 2*time.Second, "length of each wrk run")
	flag.IntVar(&c.rounds, "rounds", 9, "rounds; each runs every target once, the median is reported")
	flag.IntVar(&c.conns, "c", 64, "connections for the throughput runs")
	flag.IntVar(&c.hold, "hold", 1000, "keep-alive connections held for the RSS figure")
	flag.StringVar(&c.pin, "pin", "split", "CPU pinning: split (wrk on CPU 0, servers on CPU 1) or none")
	flag.BoolVar(&c.rebuild, "rebuild", false, "rebuild bin/ebb-sidecar and bin/ebb-test-app")
	flag.IntVar(&c.basePort, "port", 19080, "first loopback port used")
	flag.IntVar(&c.pairs, "pairs", 12, "extra back-to-back 1s runs of counting on/off, for the counting cost")
	flag.StringVar(&c.baseline, "baseline", "", "another ebb-sidecar binary (an earlier build) to pair with this one: what the changes since cost")
	flag.IntVar(&c.nice, "nice", 0, "run servers and wrk at this nice level (negative needs root) to shield them from other load")
	flag.BoolVar(&c.smoke, "smoke", false, "check that the bench still runs end to end, in seconds: -duration 1s -rounds 1 -pairs 1 -hold 50, bin/ebb-sidecar as its own baseline if -baseline is not set, and an error if wrk saw one")
	flag.Parse()
	if c.smoke {
		c.duration, c.rounds, c.pairs, c.hold = time.Second, 1, 1, 50
		if c.baseline == "" {
			c.baseline = "bin/ebb-sidecar"
		}
	}
	if c.duration <= 0 || c.duration > time.Minute || c.rounds < 1 || c.rounds > 15 || c.conns < 1 || c.conns > 1024 || c.hold < 1 || c.hold > 5000 || c.pairs < 0 || c.pairs > 100 {
		log.Fatal("out of bounds: want 0 < -duration <= 1m, 1 <= -rounds <= 15, 1 <= -c <= 1024, 1 <= -hold <= 5000, 0 <= -pairs <= 100")
	}
	if c.pin != "split" && c.pin != "none" {
		log.Fatal("-pin: want split or none")
	}
	if err := run(c); err != nil {
		log.Fatal(err)
	}
}

// target is one server under load.
type target struct {
	name string
	port int
	pids []int // the proxy's processes (nginx: master and worker); none for direct
}

func run(c benchConfig) error {
	if _, err := os.Stat("go.mod"); err != nil {
		return errors.New("run from the module root (go run ./test/bench/sidecar)")
	}
	for _, b := range []struct{ bin, pkg string }{{"bin/ebb-sidecar", "./cmd/ebb-sidecar"}, {"bin/ebb-test-app", "./test/app"}} {
		if _, err := os.Stat(b.bin); err == nil && !c.rebuild {
			continue
		}
		if err := goBuild(b.bin, b.pkg, false); err != nil {
			return err
		}
	}
	if _, err := exec.LookPath("wrk"); err != nil {
		return fmt.Errorf("wrk is needed: %w", err)
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own executable: %w", err)
	}
	script, err := writeScript()
	if err != nil {
		return err
	}
	defer os.Remove(script)

	p := c.basePort
	app := fmt.Sprintf("127.0.0.1:%d", p)
	var procs procSet
	defer procs.stopAll()
	if err := procs.start(c, "app", []string{"bin/ebb-test-app", "--listen", app}, nil); err != nil {
		return err
	}
	sidecar := func(name, bin string, port int, flags ...string) error {
		return procs.start(c, name, append([]string{bin, "--listen", fmt.Sprintf("127.0.0.1:%d", port),
			"--admin-listen", fmt.Sprintf("127.0.0.1:%d", port+100), "--upstream", app, "--log-level", "error"}, flags...), nil)
	}
	if err := sidecar("sidecar", "bin/ebb-sidecar", p+1); err != nil {
		return err
	}
	if err := sidecar("sidecar-nocount", "bin/ebb-sidecar", p+2, "--counting=false"); err != nil {
		return err
	}
	if err := sidecar("sidecar-nometrics", "bin/ebb-sidecar", p+8, "--request-metrics=false"); err != nil {
		return err
	}
	// The A/A control: this build from a copy of its binary, a process
	// like the baseline's, paired with the sidecar by the same procedure.
	dup, err := copyBinary("bin/ebb-sidecar")
	if err != nil {
		return err
	}
	defer os.RemoveAll(filepath.Dir(dup))
	if err := sidecar("sidecar-copy", dup, p+10); err != nil {
		return err
	}
	if c.baseline != "" {
		if err := sidecar("sidecar-baseline", c.baseline, p+9); err != nil {
			return err
		}
	}
	// nginx, the peer: Debian's build, one worker pinned with the sidecar.
	ngx, err := startNginx(c, p+6, app)
	if err != nil {
		return err
	}
	defer ngx.stop()
	if err := procs.start(c, "reverseproxy", []string{self, "reverseproxy", fmt.Sprintf("127.0.0.1:%d", p+3), app}, nil); err != nil {
		return err
	}
	if err := procs.start(c, "tcpforward", []string{self, "tcpforward", fmt.Sprintf("127.0.0.1:%d", p+5), app}, nil); err != nil {
		return err
	}
	ports := []int{p, p + 1, p + 2, p + 3, p + 5, p + 8, p + 10}
	if c.baseline != "" {
		ports = append(ports, p+9)
	}
	for _, port := range ports {
		if err := waitHTTP(fmt.Sprintf("http://127.0.0.1:%d/", port)); err != nil {
			return err
		}
	}
	direct := target{name: "direct", port: p}
	side := target{name: "sidecar", port: p + 1, pids: []int{procs.pid("sidecar")}}
	nocount := target{name: "sidecar, counting off", port: p + 2, pids: []int{procs.pid("sidecar-nocount")}}
	nometrics := target{name: "sidecar, request metrics off", port: p + 8, pids: []int{procs.pid("sidecar-nometrics")}}
	dupe := target{name: "sidecar, copy (A/A)", port: p + 10, pids: []int{procs.pid("sidecar-copy")}}
	var baseline target
	if c.baseline != "" {
		baseline = target{name: "sidecar, baseline", port: p + 9, pids: []int{procs.pid("sidecar-baseline")}}
	}
	nginx := target{name: "nginx", port: p + 6, pids: ngx.pids()}
	rproxy := target{name: "httputil.ReverseProxy", port: p + 3, pids: []int{procs.pid("reverseproxy")}}
	floor := target{name: "TCP forwarder", port: p + 5, pids: []int{procs.pid("tcpforward")}}
	appPid := procs.pid("app")
	measure := func(c benchConfig, t target, conns int) (wrkResult, error) {
		pids := append([]int{appPid}, t.pids...)
		before := cpuSeconds(pids)
		res, err := wrk(c, script, t.port, conns)
		if err != nil {
			return res, err
		}
		res.cpu = res.wrkCPU + cpuSeconds(pids) - before
		res.cpuPerReq = res.cpu / float64(res.n)
		return res, nil
	}

	load0 := loadavg()
	// Throughput, c=64: every target once per round, order rotated; ratios
	// are taken within a round, where the neighbours' load is alike.
	res := map[string][]wrkResult{}
	errs := 0
	// With -baseline, the baseline build takes part too: the figures of the
	// build before and this one from the same rounds.
	targets := []target{direct, side, nocount, nginx, rproxy}
	if c.baseline != "" {
		targets = append(targets, baseline)
	}
	for r := range c.rounds {
		for i := range targets {
			t := targets[(i+r)%len(targets)]
			w, err := measure(c, t, c.conns)
			if err != nil {
				return err
			}
			res[t.name] = append(res[t.name], w)
			errs += w.errors
			fmt.Fprintf(os.Stderr, "round %d  c=%d  %-22s %9.0f req/s  %5.1f µs CPU/req\n", r+1, c.conns, t.name, w.rps, 1e6*w.cpuPerReq)
		}
	}
	// Pairs: the sidecar against each variant in turn, counting off,
	// request metrics off, a copy of its own binary (the A/A control) and
	// the baseline build, each pair four adjacent 1 s runs in the order
	// ABBA (BAAB every other pair), the variants' order rotated every
	// pair. The differences are small, so they get many short pairs.
	pairCfg := c
	pairCfg.duration = time.Second
	others := []target{nocount, nometrics, dupe}
	if c.baseline != "" {
		others = append(others, baseline)
	}
	pairs := map[string][][2]wrkResult{}
	for r := range c.pairs {
		for i := range others {
			o := others[(i+r)%len(others)]
			got, err := abba(measure, pairCfg, side, o, r%2 == 1)
			if err != nil {
				return err
			}
			errs += got[0].errors + got[1].errors
			pairs[o.name] = append(pairs[o.name], got)
			if o.name == nocount.name {
				res[side.name] = append(res[side.name], got[0])
				res[nocount.name] = append(res[nocount.name], got[1])
			}
			fmt.Fprintf(os.Stderr, "pair %d  c=%d  sidecar %9.0f req/s  %-28s %9.0f req/s\n", r+1, c.conns, got[0].rps, o.name, got[1].rps)
		}
	}
	// Latency, c=1: direct, sidecar, nginx and the bare TCP forwarder back to
	// back, order rotated. The forwarder (two io.Copy goroutines per
	// connection, no HTTP at all) is the floor: what one more user-space hop
	// costs on this machine, whatever the proxy does.
	lat := map[string][]wrkResult{}
	quad := []target{direct, side, nginx, floor}
	if c.baseline != "" {
		quad = append(quad, baseline)
	}
	for r := range c.rounds {
		for i := range quad {
			t := quad[(i+r)%len(quad)]
			w, err := measure(c, t, 1)
			if err != nil {
				return err
			}
			lat[t.name] = append(lat[t.name], w)
			errs += w.errors
			fmt.Fprintf(os.Stderr, "round %d  c=1   %-22s p50 %6.1fµs p99 %6.1fµs\n", r+1, t.name, w.p50, w.p99)
		}
	}
	load1 := loadavg()
	busyRSS := rssKiB(procs.pid("sidecar"))
	ngxBusyRSS := sumRSSKiB(ngx.pids())

	// RSS of a fresh sidecar: idle, then holding c.hold keep-alive connections.
	fresh := p + 4
	if err := procs.start(c, "sidecar-rss", []string{"bin/ebb-sidecar", "--listen", fmt.Sprintf("127.0.0.1:%d", fresh),
		"--admin-listen", fmt.Sprintf("127.0.0.1:%d", fresh+100), "--upstream", app, "--log-level", "error"}, nil); err != nil {
		return err
	}
	if err := waitHTTP(fmt.Sprintf("http://127.0.0.1:%d/ready", fresh+100)); err != nil {
		return err
	}
	time.Sleep(time.Second)
	idleRSS := rssKiB(procs.pid("sidecar-rss"))
	conns, err := holdConns(fmt.Sprintf("127.0.0.1:%d", fresh), c.hold)
	if err != nil {
		return err
	}
	time.Sleep(time.Second)
	holdRSS := rssKiB(procs.pid("sidecar-rss"))
	for _, cn := range conns {
		cn.Close()
	}
	// The same for a fresh nginx (master + worker).
	ngxFresh, err := startNginx(c, p+7, app)
	if err != nil {
		return err
	}
	defer ngxFresh.stop()
	time.Sleep(time.Second)
	ngxIdleRSS := sumRSSKiB(ngxFresh.pids())
	conns, err = holdConns(fmt.Sprintf("127.0.0.1:%d", p+7), c.hold)
	if err != nil {
		return err
	}
	time.Sleep(time.Second)
	ngxHoldRSS := sumRSSKiB(ngxFresh.pids())
	for _, cn := range conns {
		cn.Close()
	}

	size, err := strippedSize()
	if err != nil {
		return err
	}

	// The table.
	perRound := func(m map[string][]wrkResult, f func(a, b wrkResult) float64, a, b string) float64 {
		var v []float64
		for i := range min(len(m[a]), len(m[b])) {
			v = append(v, f(m[a][i], m[b][i]))
		}
		return median(v)
	}
	rps := func(name string) float64 {
		return median(mapSlice(res[name][:c.rounds], func(a wrkResult) float64 { return a.rps }))
	}
	wallRatio := func(a, b wrkResult) float64 { return a.rps / b.rps }
	cpuRatio := func(a, b wrkResult) float64 { return b.cpuPerReq / a.cpuPerReq }
	ratio, rpRatio := perRound(res, wallRatio, side.name, direct.name), perRound(res, wallRatio, rproxy.name, direct.name)
	ratioCPU, rpRatioCPU := perRound(res, cpuRatio, side.name, direct.name), perRound(res, cpuRatio, rproxy.name, direct.name)
	ngxRatio, ngxRatioCPU := perRound(res, wallRatio, nginx.name, direct.name), perRound(res, cpuRatio, nginx.name, direct.name)
	sideOverNgx, sideOverNgxCPU := perRound(res, wallRatio, side.name, nginx.name), perRound(res, cpuRatio, side.name, nginx.name)
	cost := 1 - perRound(res, wallRatio, side.name, nocount.name)
	var costs []float64
	for i := range len(res[side.name]) {
		costs = append(costs, 1-res[side.name][i].rps/res[nocount.name][i].rps)
	}
	costLo, costHi := quartiles(costs)
	var cpuCosts []float64
	for i := range len(res[side.name]) {
		cpuCosts = append(cpuCosts, 1-res[nocount.name][i].cpuPerReq/res[side.name][i].cpuPerReq)
	}
	cpuCostLo, cpuCostHi := quartiles(cpuCosts)
	costCPU := 1 - perRound(res, cpuRatio, side.name, nocount.name)
	p50 := func(name string) float64 {
		return perRound(lat, func(a, _ wrkResult) float64 { return a.p50 }, name, name)
	}
	p99 := func(name string) float64 {
		return perRound(lat, func(a, _ wrkResult) float64 { return a.p99 }, name, name)
	}
	addP50 := perRound(lat, func(a, b wrkResult) float64 { return a.p50 - b.p50 }, side.name, direct.name)
	addP99 := perRound(lat, func(a, b wrkResult) float64 { return a.p99 - b.p99 }, side.name, direct.name)
	ngxAddP50 := perRound(lat, func(a, b wrkResult) float64 { return a.p50 - b.p50 }, nginx.name, direct.name)
	ngxAddP99 := perRound(lat, func(a, b wrkResult) float64 { return a.p99 - b.p99 }, nginx.name, direct.name)
	sideMinusNgxP50 := perRound(lat, func(a, b wrkResult) float64 { return a.p50 - b.p50 }, side.name, nginx.name)
	floorP50 := perRound(lat, func(a, b wrkResult) float64 { return a.p50 - b.p50 }, floor.name, direct.name)
	overFloorP50 := perRound(lat, func(a, b wrkResult) float64 { return a.p50 - b.p50 }, side.name, floor.name)
	mib := func(kib int) float64 { return float64(kib) / 1024 }
	met := func(ok bool) string {
		if ok {
			return "yes"
		}
		return "**no**"
	}

	fmt.Printf("\n`go run ./test/bench/sidecar %s`\n\n", strings.Join(os.Args[1:], " "))
	fmt.Printf("%s per target per round, %d rounds, medians; wrk -t1; pinning: %s; nice %d; load average %s → %s; %d CPUs, %s\n\n",
		c.duration, c.rounds, pinText(c.pin), c.nice, load0, load1, runtime.NumCPU(), cpuModel())
	fmt.Println("| figure | measured | target | met |")
	fmt.Println("|---|---:|---:|---|")
	fmt.Printf("| throughput direct to app, c=%d | %.0f req/s | | |\n", c.conns, rps(direct.name))
	fmt.Printf("| throughput via ebb-sidecar | %.0f req/s | | |\n", rps(side.name))
	fmt.Printf("| throughput via ebb-sidecar, counting off | %.0f req/s | | |\n", rps(nocount.name))
	fmt.Printf("| throughput via nginx (peer: %s, 1 worker, upstream keepalive) | %.0f req/s | | |\n", ngx.version, rps(nginx.name))
	fmt.Printf("| throughput via httputil.ReverseProxy (baseline) | %.0f req/s | | |\n", rps(rproxy.name))
	fmt.Printf("| **sidecar ÷ direct** (wall clock, median of per-round ratios) | **%.2f** | ≥ 0.45 | %s |\n", ratio, met(ratio >= 0.45))
	fmt.Printf("| sidecar ÷ direct, CPU-normalised (CPU µs/req of wrk+app+proxy) | %.2f | ≥ 0.45 | %s |\n", ratioCPU, met(ratioCPU >= 0.45))
	fmt.Printf("| nginx ÷ direct (peer), wall / CPU-normalised | %.2f / %.2f | | |\n", ngxRatio, ngxRatioCPU)
	fmt.Printf("| ReverseProxy ÷ direct (baseline), wall / CPU-normalised | %.2f / %.2f | ≈ 0.27–0.32 | |\n", rpRatio, rpRatioCPU)
	fmt.Printf("| sidecar ÷ nginx, wall / CPU-normalised | %.2f / %.2f | | |\n", sideOverNgx, sideOverNgxCPU)
	var baseOverNgx, baseOverNgxCPU, baseAddP50, baseOverFloorP50 float64
	if c.baseline != "" {
		baseOverNgx, baseOverNgxCPU = perRound(res, wallRatio, baseline.name, nginx.name), perRound(res, cpuRatio, baseline.name, nginx.name)
		baseAddP50 = perRound(lat, func(a, b wrkResult) float64 { return a.p50 - b.p50 }, baseline.name, direct.name)
		baseOverFloorP50 = perRound(lat, func(a, b wrkResult) float64 { return a.p50 - b.p50 }, baseline.name, floor.name)
		fmt.Printf("| the baseline build (-baseline), same rounds: ÷ direct, wall / CPU-normalised | %.2f / %.2f | | |\n",
			perRound(res, wallRatio, baseline.name, direct.name), perRound(res, cpuRatio, baseline.name, direct.name))
		fmt.Printf("| the baseline build ÷ nginx, wall / CPU-normalised | %.2f / %.2f | | |\n", baseOverNgx, baseOverNgxCPU)
	}
	costMet := met(cost <= 0.03)
	if costHi-costLo > 0.06 {
		costMet = fmt.Sprintf("not resolvable here: pairs spread %.0f…%.0f %% (interquartile)", 100*costLo, 100*costHi)
	}
	fmt.Printf("| **counting cost** (1 − on÷off, median over %d rounds and ABBA pairs), wall clock | **%.1f %%** | ≤ 3 %% | %s |\n", c.rounds+c.pairs, 100*cost, costMet)
	cpuCostMet := met(costCPU <= 0.03)
	if cpuCostHi-cpuCostLo > 0.06 {
		cpuCostMet = fmt.Sprintf("not resolvable here: pairs spread %.0f…%.0f %% (interquartile)", 100*cpuCostLo, 100*cpuCostHi)
	}
	fmt.Printf("| counting cost, CPU-normalised | %.1f %% | ≤ 3 %% | %s |\n", 100*costCPU, cpuCostMet)
	// Every pair figure but counting's (above): the A/A control comes
	// right before the baseline's line, the noise floor next to the figure
	// it bounds.
	pairCosts := map[string]pairCost{}
	for _, o := range others {
		pairCosts[o.name] = costOf(pairs[o.name])
	}
	aa := pairCosts[dupe.name]
	// The pairs resolve 1 % when the A/A's median is within it and its
	// spread is no wider than the counting cost's bound above allows.
	aaResolved := math.Abs(aa.wall) <= 0.01 && aa.hi-aa.lo <= 0.06
	for _, o := range others[1:] {
		pc := pairCosts[o.name]
		var what, target, ok, cpuTarget, cpuOK string
		switch o.name {
		case nometrics.name:
			what, target, ok = "request-metrics cost (1 − on÷off)", "≤ 3 %", met(pc.wall <= 0.03)
		case dupe.name:
			what, target, cpuTarget = "A/A control: 1 − this build ÷ a copy of its binary, same procedure (the noise floor of the pair figures)", "≈ 0 (within ±1 %)", "≈ 0 (within ±1 %)"
			switch {
			case aaResolved:
				ok = "yes"
			case pc.lo <= 0 && pc.hi >= 0:
				ok = fmt.Sprintf("≈ 0 within the noise, too wide here to resolve 1 %%: pairs spread %.0f…%.0f %% (interquartile)", 100*pc.lo, 100*pc.hi)
			default:
				ok = "**no**: the pairs lean one way (a biased procedure, or the machine's load changed under it)"
			}
			cpuOK = met(math.Abs(pc.cpu) <= 0.01)
		case baseline.name:
			what, target = "cost of this build over the baseline (1 − this÷baseline)", "reported, against the A/A control"
			if !aaResolved {
				ok = "wall clock not resolvable here (A/A line): read the CPU-normalised figure"
			}
		}
		fmt.Printf("| **%s**, median of %d ABBA pairs, wall clock (interquartile) | **%.1f %%** (%.1f…%.1f %%) | %s | %s |\n",
			what, pc.n, 100*pc.wall, 100*pc.lo, 100*pc.hi, target, ok)
		fmt.Printf("| %s, CPU-normalised | %.1f %% | %s | %s |\n", what, 100*pc.cpu, cpuTarget, cpuOK)
	}
	fmt.Printf("| p50 c=1 direct / sidecar / nginx | %.0f / %.0f / %.0f µs | | |\n", p50(direct.name), p50(side.name), p50(nginx.name))
	fmt.Printf("| **p50 added** (median of per-round differences) | **%+.0f µs** | ≤ +40 µs | %s |\n", addP50, met(addP50 <= 40))
	fmt.Printf("| p50 added by nginx (peer) | %+.0f µs | | |\n", ngxAddP50)
	fmt.Printf("| p50 added by a bare TCP forwarder (io.Copy both ways, no HTTP): this machine's floor for any proxy hop | %+.0f µs | | |\n", floorP50)
	fmt.Printf("| p50 added by the sidecar over that floor (its own HTTP work) | %+.0f µs | | |\n", overFloorP50)
	if c.baseline != "" {
		fmt.Printf("| p50 added by the baseline build, same rounds / over the floor | %+.0f / %+.0f µs | | |\n", baseAddP50, baseOverFloorP50)
	}
	fmt.Printf("| p99 c=1 direct / sidecar / nginx | %.0f / %.0f / %.0f µs | | |\n", p99(direct.name), p99(side.name), p99(nginx.name))
	p99Met := met(addP99 <= 150)
	if p99(direct.name) > 1000 {
		p99Met = fmt.Sprintf("not measurable here: direct p99 alone is %.1f ms (other processes' CPU load)", p99(direct.name)/1000)
	}
	fmt.Printf("| **p99 added** (median of per-round differences) | **%+.0f µs** | ≤ +150 µs | %s |\n", addP99, p99Met)
	fmt.Printf("| p99 added by nginx (peer) | %+.0f µs | | |\n", ngxAddP99)
	fmt.Printf("| **sidecar RSS idle** (fresh process) | **%.1f MiB** | ≤ 12 MiB | %s |\n", mib(idleRSS), met(mib(idleRSS) <= 12))
	fmt.Printf("| nginx RSS idle (fresh; master + worker) | %.1f MiB | | |\n", mib(ngxIdleRSS))
	fmt.Printf("| **sidecar RSS holding %d keep-alive conns** | **%.1f MiB** | ≤ 30 MiB | %s |\n", c.hold, mib(holdRSS), met(mib(holdRSS) <= 30))
	fmt.Printf("| nginx RSS holding %d keep-alive conns (master + worker) | %.1f MiB | | |\n", c.hold, mib(ngxHoldRSS))
	fmt.Printf("| sidecar / nginx RSS after the load above | %.1f / %.1f MiB | | |\n", mib(busyRSS), mib(ngxBusyRSS))
	fmt.Printf("| **stripped binary** (-s -w) | **%.1f MB** | ≤ 15 MB | %s |\n", float64(size)/1e6, met(size <= 15e6))
	fmt.Printf("| wrk errors (non-2xx, socket) over all runs | %d | 0 | %s |\n", errs, met(errs == 0))
	fmt.Println()
	fmt.Printf("sidecar ÷ direct vs nginx ÷ direct (c=%d): %.2f vs %.2f; sidecar ÷ nginx %.2f wall clock, %.2f CPU-normalised (medians of per-round ratios)\n\n",
		c.conns, ratio, ngxRatio, sideOverNgx, sideOverNgxCPU)
	fmt.Printf("p50 added at c=1: sidecar %+.0f µs vs nginx %+.0f µs; sidecar − nginx %+.0f µs; a bare TCP forwarder %+.0f µs, the sidecar over it %+.0f µs (medians of per-round differences)\n",
		addP50, ngxAddP50, sideMinusNgxP50, floorP50, overFloorP50)
	if c.baseline != "" {
		fmt.Printf("\nthe baseline build %s in the same rounds: ÷ nginx %.2f wall clock, %.2f CPU-normalised; p50 added at c=1 %+.0f µs, over the TCP forwarder %+.0f µs\n",
			c.baseline, baseOverNgx, baseOverNgxCPU, baseAddP50, baseOverFloorP50)
	}
	if c.pairs > 0 {
		fmt.Printf("\nA/A control, this build ÷ a copy of its binary (%d ABBA pairs): 1 − this÷copy %.1f %% (interquartile %.1f…%.1f %%), %.1f %% CPU-normalised\n",
			aa.n, 100*aa.wall, 100*aa.lo, 100*aa.hi, 100*aa.cpu)
		if c.baseline != "" {
			ab := pairCosts[baseline.name]
			fmt.Printf("A/B, this build ÷ the baseline %s (%d ABBA pairs, the same procedure): 1 − this÷baseline %.1f %% (interquartile %.1f…%.1f %%), %.1f %% CPU-normalised\n",
				c.baseline, ab.n, 100*ab.wall, 100*ab.lo, 100*ab.hi, 100*ab.cpu)
		}
	}
	if c.smoke && errs > 0 {
		return fmt.Errorf("smoke: wrk saw %d errors (non-2xx or socket)", errs)
	}
	return nil
}

// abba runs a and b at c.conns connections back to back in the order a,
// b, b, a (b, a, a, b with flip), so that a drift of the machine's load
// over the four runs falls on both alike, and returns each one's two runs
// as one. Two runs that are not counted come first, b then a (a then b with
// flip): each side has just served when the pair starts, however long it
// sat idle before (a is in every pair, b in one of four), and each side's
// two runs follow one of its own and one of the other's.
func abba(measure func(benchConfig, target, int) (wrkResult, error), c benchConfig, a, b target, flip bool) ([2]wrkResult, error) {
	order := []int{1, 0, 0, 1, 1, 0}
	if flip {
		order = []int{0, 1, 1, 0, 0, 1}
	}
	var got [2]wrkResult
	for k, i := range order {
		w, err := measure(c, []target{a, b}[i], c.conns)
		if err != nil {
			return got, err
		}
		if k < 2 {
			w = wrkResult{errors: w.errors}
		}
		got[i] = got[i].plus(w)
	}
	return got, nil
}

// pairCost is what pairs [this sidecar, a variant] say the sidecar costs
// over the variant: 1 − this÷variant in requests/s (median and
// interquartile range over the pairs) and in CPU per request (median).
type pairCost struct {
	n                 int
	wall, lo, hi, cpu float64
}

func costOf(pairs [][2]wrkResult) pairCost {
	var wall, cpu []float64
	for _, pr := range pairs {
		wall = append(wall, 1-pr[0].rps/pr[1].rps)
		cpu = append(cpu, 1-pr[1].cpuPerReq/pr[0].cpuPerReq)
	}
	lo, hi := quartiles(wall)
	return pairCost{n: len(pairs), wall: median(wall), lo: lo, hi: hi, cpu: median(cpu)}
}

// copyBinary copies the executable at path into a new temp dir: the same
// build from another file, for the A/A control.
func copyBinary(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("copy %s: %w", path, err)
	}
	dir, err := os.MkdirTemp("", "ebb-bench-copy")
	if err != nil {
		return "", fmt.Errorf("temp dir: %w", err)
	}
	out := filepath.Join(dir, filepath.Base(path))
	if err := os.WriteFile(out, b, 0o755); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("copy %s: %w", path, err)
	}
	return out, nil
}

// wrap prefixes argv with the pinning to cpu and the nice level.
func (c benchConfig) wrap(argv []string, cpu string) []string {
	if c.pin == "split" {
		argv = append([]string{"taskset", "-c", cpu}, argv...)
	}
	if c.nice != 0 {
		argv = append([]string{"nice", "-n", strconv.Itoa(c.nice)}, argv...)
	}
	return argv
}

func pinText(pin string) string {
	if pin == "split" {
		return "wrk on CPU 0, app + sidecar/proxy on CPU 1 (taskset; Go sizes GOMAXPROCS=1 from the affinity)"
	}
	return "none (all processes share all CPUs)"
}

func goBuild(out, pkg string, strip bool) error {
	args := []string{"build", "-o", out}
	if strip {
		args = append(args, "-trimpath", "-ldflags=-s -w")
	}
	cmd := exec.Command("go", append(args, pkg)...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s: %w", pkg, err)
	}
	return nil
}

func strippedSize() (int64, error) {
	dir, err := os.MkdirTemp("", "ebb-bench")
	if err != nil {
		return 0, fmt.Errorf("temp dir: %w", err)
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "ebb-sidecar")
	if err := goBuild(out, "./cmd/ebb-sidecar", true); err != nil {
		return 0, err
	}
	fi, err := os.Stat(out)
	if err != nil {
		return 0, fmt.Errorf("stat stripped binary: %w", err)
	}
	return fi.Size(), nil
}

// procSet is the servers started by the bench.
type procSet struct {
	names []string
	cmds  []*exec.Cmd
}

func (ps *procSet) start(c benchConfig, name string, argv []string, env []string) error {
	argv = c.wrap(argv, "1")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	ps.names = append(ps.names, name)
	ps.cmds = append(ps.cmds, cmd)
	return nil
}

func (ps *procSet) pid(name string) int {
	return ps.cmds[slices.Index(ps.names, name)].Process.Pid
}

func (ps *procSet) stopAll() {
	for _, cmd := range ps.cmds {
		cmd.Process.Signal(os.Interrupt)
	}
	for _, cmd := range ps.cmds {
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
		}
	}
}

// nginxProc is the peer proxy: Debian's nginx (nginx-light) as its own
// process, in the foreground, with exactly one worker, pinned like the
// sidecar, its config, pid file, error log and temp paths in a temp dir.
type nginxProc struct {
	dir     string
	version string
	cmd     *exec.Cmd
	done    chan struct{} // closed when the master has exited
	workers []int
}

const nginxConf = `# Generated by test/bench/sidecar: nginx as the peer of ebb-sidecar.
daemon off;
master_process on;
worker_processes 1;
worker_rlimit_nofile %[1]d;
pid %[2]s/nginx.pid;
error_log %[2]s/error.log warn;
%[3]s
events {
    worker_connections %[4]d;
}
http {
    access_log off;
    # No cap on requests per client connection: the sidecar, the app and wrk
    # keep a connection for the whole run, so nginx does too.
    keepalive_requests 1000000000;
%[5]s
    upstream app {
        server %[6]s;
        keepalive 64;
        keepalive_requests 1000000000;
    }
    server {
        listen 127.0.0.1:%[7]d;
        location / {
            proxy_pass http://app;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }
    }
}
`

// startNginx starts nginx on 127.0.0.1:port proxying to upstream and
// returns once it answers 200 there.
func startNginx(c benchConfig, port int, upstream string) (n *nginxProc, err error) {
	bin, err := exec.LookPath("nginx")
	if err != nil {
		return nil, fmt.Errorf("nginx is needed (make debs installs Debian's nginx-light): %w", err)
	}
	v, err := exec.Command(bin, "-V").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("%s -V: %w\n%s", bin, err, v)
	}
	dir, err := os.MkdirTemp("", "ebb-bench-nginx")
	if err != nil {
		return nil, fmt.Errorf("temp dir: %w", err)
	}
	n = &nginxProc{dir: dir, version: strings.TrimPrefix(firstLine(string(v)), "nginx version: "), done: make(chan struct{})}
	defer func() {
		if err != nil {
			n.stop()
		}
	}()
	// Every temp path the build has, inside the temp dir: the compiled-in
	// ones (/var/lib/nginx/...) may not exist or be writable.
	var temps strings.Builder
	for _, m := range []string{"client_body", "proxy", "fastcgi", "uwsgi", "scgi"} {
		if m != "client_body" && m != "proxy" && strings.Contains(string(v), "--without-http_"+m+"_module") {
			continue
		}
		fmt.Fprintf(&temps, "    %s_temp_path %s/%s;\n", m, dir, m)
	}
	user := "" // as root, the worker runs as root too (the default would be nobody)
	if os.Geteuid() == 0 {
		user = "user root;"
	}
	wconns := max(4096, 2*(c.hold+c.conns)+256) // client and upstream connections both count
	conf := filepath.Join(dir, "nginx.conf")
	text := fmt.Sprintf(nginxConf, 2*wconns+64, dir, user, wconns, temps.String(), upstream, port)
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		return n, fmt.Errorf("write nginx.conf: %w", err)
	}
	// -e: messages from before the config is read go to the same log.
	argv := c.wrap([]string{bin, "-p", dir + "/", "-c", conf, "-e", filepath.Join(dir, "error.log")}, "1")
	n.cmd = exec.Command(argv[0], argv[1:]...)
	// Stderr is left out: what nginx writes there is also in the error log,
	// which an error returned here quotes.
	// If the bench dies without cleaning up, the master gets SIGTERM, a fast
	// shutdown that takes the worker with it.
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := n.cmd.Start(); err != nil {
		n.cmd = nil
		return n, fmt.Errorf("start nginx: %w", err)
	}
	go func() { n.cmd.Wait(); close(n.done) }()
	u := fmt.Sprintf("http://127.0.0.1:%d/", port)
	client := &http.Client{Timeout: time.Second} // whatever else holds the port may never answer
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-n.done:
			return n, fmt.Errorf("nginx exited at start (%s)%s", n.cmd.ProcessState, n.errorLog())
		default:
		}
		resp, err := client.Get(u)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			return n, fmt.Errorf("nginx on %s did not answer 200 within 10s%s", u, n.errorLog())
		}
		time.Sleep(50 * time.Millisecond)
	}
	n.workers = childPids(n.cmd.Process.Pid)
	if len(n.workers) != 1 {
		return n, fmt.Errorf("nginx: want one worker process, found %d (%v)", len(n.workers), n.workers)
	}
	return n, nil
}

// pids is the master and the worker.
func (n *nginxProc) pids() []int {
	return append([]int{n.cmd.Process.Pid}, n.workers...)
}

// errorLog is the error log's text for an error message, if it has any.
func (n *nginxProc) errorLog() string {
	b, _ := os.ReadFile(filepath.Join(n.dir, "error.log"))
	if len(bytes.TrimSpace(b)) == 0 {
		return ""
	}
	return "; error log:\n" + string(b)
}

// stop shuts nginx down (SIGTERM: fast shutdown), kills what is left and
// removes the temp dir.
func (n *nginxProc) stop() {
	if n.cmd != nil {
		workers := append(n.workers, childPids(n.cmd.Process.Pid)...)
		select {
		case <-n.done:
		default:
			n.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-n.done:
			case <-time.After(5 * time.Second):
				n.cmd.Process.Kill()
				<-n.done
			}
		}
		// A worker whose master was killed outlives it; it is still ours
		// while its command line says so.
		for _, pid := range workers {
			if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && bytes.HasPrefix(b, []byte("nginx: worker")) {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	os.RemoveAll(n.dir)
}

// childPids lists the processes whose parent is pid.
func childPids(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", child))
		if err != nil {
			continue
		}
		// After the command name: state, then the parent's pid.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, child)
		}
	}
	return out
}

// sumRSSKiB adds up the RSS of processes (nginx: master + worker; pages they
// share are counted twice, as a reader of ps would).
func sumRSSKiB(pids []int) int {
	total := 0
	for _, pid := range pids {
		if k := rssKiB(pid); k > 0 {
			total += k
		}
	}
	return total
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return strings.TrimSpace(s)
}

func waitHTTP(u string) error {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(u)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s did not answer 200 within 10s", u)
}

const luaScript = `done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("EBB %d %.3f %.1f %.1f %d\n", summary.requests, summary.duration / 1e6,
    latency:percentile(50), latency:percentile(99), e.connect + e.read + e.write + e.status + e.timeout))
end
`

func writeScript() (string, error) {
	f, err := os.CreateTemp("", "ebb-bench-*.lua")
	if err != nil {
		return "", fmt.Errorf("write wrk script: %w", err)
	}
	defer f.Close()
	if _, err := f.WriteString(luaScript); err != nil {
		return "", fmt.Errorf("write wrk script: %w", err)
	}
	return f.Name(), nil
}

type wrkResult struct {
	n         int
	secs      float64 // wall clock
	rps       float64
	wrkCPU    float64 // seconds of CPU wrk used
	cpu       float64 // seconds of CPU wrk, the app and the proxy used
	cpuPerReq float64 // seconds of CPU (wrk + app + proxy) per request
	p50, p99  float64 // µs
	errors    int
}

// plus is r and s as one run: their requests over their time; the
// percentiles are the mean of the two (the pairs use only the rates).
func (r wrkResult) plus(s wrkResult) wrkResult {
	if r.n == 0 {
		s.errors += r.errors
		return s
	}
	if s.n == 0 {
		r.errors += s.errors
		return r
	}
	out := wrkResult{n: r.n + s.n, secs: r.secs + s.secs, wrkCPU: r.wrkCPU + s.wrkCPU, cpu: r.cpu + s.cpu,
		p50: (r.p50 + s.p50) / 2, p99: (r.p99 + s.p99) / 2, errors: r.errors + s.errors}
	out.rps = float64(out.n) / out.secs
	out.cpuPerReq = out.cpu / float64(out.n)
	return out
}

func wrk(c benchConfig, script string, port, conns int) (wrkResult, error) {
	argv := []string{"wrk", "-t1", "-c" + strconv.Itoa(conns), "-d" + c.duration.String(), "--timeout", "5s", "-s", script,
		fmt.Sprintf("http://127.0.0.1:%d/", port)}
	argv = c.wrap(argv, "0")
	ctx, cancel := context.WithTimeout(context.Background(), c.duration+30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	out, err := cmd.Output()
	if err != nil {
		return wrkResult{}, fmt.Errorf("%s: %w", strings.Join(argv, " "), err)
	}
	var wrkCPU float64
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		wrkCPU = time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
	}
	for _, line := range strings.Split(string(out), "\n") {
		var secs float64
		var r wrkResult
		if _, err := fmt.Sscanf(line, "EBB %d %f %f %f %d", &r.n, &secs, &r.p50, &r.p99, &r.errors); err == nil {
			r.secs = secs
			r.rps = float64(r.n) / secs
			r.wrkCPU = wrkCPU
			return r, nil
		}
	}
	return wrkResult{}, fmt.Errorf("no result in wrk output:\n%s", out)
}

// holdConns opens n connections, sends one request on each and keeps them
// open.
func holdConns(addr string, n int) ([]net.Conn, error) {
	conns := make([]net.Conn, n)
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			c, err := oneRequest(addr)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = err
			}
			conns[i] = c
		}()
	}
	wg.Wait()
	if firstErr != nil {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
		return nil, fmt.Errorf("hold %d connections: %w", n, firstErr)
	}
	return conns, nil
}

func oneRequest(addr string) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: bench\r\n\r\n"); err != nil {
		c.Close()
		return nil, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		c.Close()
		return nil, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	c.SetDeadline(time.Time{})
	return c, nil
}

func rssKiB(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	return -1
}

// cpuSeconds sums the user and system CPU time of processes.
func cpuSeconds(pids []int) float64 {
	const ticksPerSecond = 100 // USER_HZ on Linux
	total := 0
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// After the command name (which may hold spaces): utime and stime
		// are fields 14 and 15 of the line.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		u, _ := strconv.Atoi(f[11])
		st, _ := strconv.Atoi(f[12])
		total += u + st
	}
	return float64(total) / ticksPerSecond
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(string(b))[:1], " ")
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "model name") {
			if i := strings.IndexByte(line, ':'); i >= 0 {
				return strings.TrimSpace(line[i+1:])
			}
		}
	}
	return ""
}

// quartiles returns the first and third quartiles of v.
func quartiles(v []float64) (float64, float64) {
	if len(v) == 0 {
		return 0, 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/4], s[(3*len(s))/4]
}

func mapSlice[T any](v []T, f func(T) float64) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = f(x)
	}
	return out
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// serveReverseProxy is the baseline: a plain httputil.ReverseProxy with the
// default transport, its idle pool raised to hold c=64.
func serveReverseProxy(listen, upstream string) error {
	u, err := url.Parse("http://" + upstream)
	if err != nil {
		return fmt.Errorf("upstream: %w", err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 256 // the default 2 would make it churn connections at c=64
	rp.Transport = tr
	// wrk stopping mid-request cancels the exchanges in flight: expected at
	// the end of every run, so not logged.
	rp.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
		if !errors.Is(err, context.Canceled) {
			log.Printf("reverseproxy: %v", err)
		}
		w.WriteHeader(http.StatusBadGateway)
	}
	srv := &http.Server{Addr: listen, Handler: rp, ReadHeaderTimeout: 10 * time.Second}
	return srv.ListenAndServe()
}

// serveTCPForward is the latency floor: a bare TCP relay with no HTTP
// parsing, one goroutine per direction, as little as a user-space hop does.
func serveTCPForward(listen, upstream string) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	for {
		in, err := ln.Accept()
		if err != nil {
			return fmt.Errorf("accept: %w", err)
		}
		go func() {
			defer in.Close()
			out, err := net.Dial("tcp", upstream)
			if err != nil {
				return
			}
			defer out.Close()
			go func() {
				io.Copy(out, in)
				out.(*net.TCPConn).CloseWrite()
			}()
			io.Copy(in, out)
		}()
	}
}
