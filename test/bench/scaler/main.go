package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/ebb-dev/ebb/internal/holdpush"
	"github.com/ebb-dev/ebb/internal/sidecarapi"
	"github.com/ebb-dev/ebb/scaler"
)

const (
	childEnv = "EBB_BENCH_SCALER_CHILD"
	ns       = "bench"
)

type benchFlags struct {
	sidecars, apps, coldApps int
	warmup, measure          time.Duration
	getMetricsCalls, pushes  int
	smoke                    bool
}

func main() {
	if os.Getenv(childEnv) != "" {
		if err := child(os.Getenv(childEnv), os.Args[1:]); err != nil {
			fmt.Fprintln(os.Stderr, "bench child:", err)
			os.Exit(1)
		}
		return
	}
	var f benchFlags
	flag.IntVar(&f.sidecars, "sidecars", 5000, "simulated sidecars (loopback HTTP servers)")
	flag.IntVar(&f.apps, "apps", 1000, "apps the sidecars are spread over")
	flag.IntVar(&f.coldApps, "cold-apps", 100, "apps with no pod, woken by held pushes")
	flag.DurationVar(&f.warmup, "warmup", 5*time.Second, "ticks before measuring CPU")
	flag.DurationVar(&f.measure, "measure", 20*time.Second, "CPU measurement span")
	flag.IntVar(&f.getMetricsCalls, "getmetrics-calls", 20000, "GetMetrics calls over all apps")
	flag.IntVar(&f.pushes, "pushes", 1000, "held pushes timed to StreamIsActive")
	flag.BoolVar(&f.smoke, "smoke", false, "check that the bench still runs end to end, in seconds: -sidecars 50 -apps 10 -cold-apps 5 -warmup 2s -measure 2s -getmetrics-calls 100 -pushes 20, and an error unless every sidecar was read without error")
	flag.Parse()
	if f.smoke {
		f.sidecars, f.apps, f.coldApps, f.warmup, f.measure, f.getMetricsCalls, f.pushes = 50, 10, 5, 2*time.Second, 2*time.Second, 100, 20
	}
	if err := run(f); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func raiseFileLimit() error {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return fmt.Errorf("getrlimit: %w", err)
	}
	l.Cur = l.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return fmt.Errorf("setrlimit: %w", err)
	}
	return nil
}

type podSpec struct {
	App  string `json:"app"`
	Port int    `json:"port"`
}

// sidecars starts n loopback HTTP servers serving changing stats.
func sidecars(n, apps int) ([]podSpec, func(), error) {
	start := time.Now()
	var servers []*http.Server
	pods := make([]podSpec, 0, n)
	for i := range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, nil, fmt.Errorf("sidecar %d: %w", i, err)
		}
		boot := uint64(1000 + i)
		srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			el := time.Since(start)
			// Requests come and go between ticks: the total grows, the
			// in-flight count wanders between 0 and 2.
			s := sidecarapi.Snapshot{InFlight: int64((i + int(el/time.Second)) % 3), Total: uint64(el/(10*time.Millisecond)) * uint64(1+i%5), BootID: boot}
			var buf [sidecarapi.MaxStatsLine]byte
			w.Header().Set("Content-Type", sidecarapi.StatsContentType)
			_, _ = w.Write(s.Append(buf[:0]))
		})}
		go func() { _ = srv.Serve(l) }()
		servers = append(servers, srv)
		pods = append(pods, podSpec{App: fmt.Sprintf("app-%04d", i%apps), Port: l.Addr().(*net.TCPAddr).Port})
	}
	return pods, func() {
		for _, s := range servers {
			_ = s.Close()
		}
	}, nil
}

type proc struct {
	cmd   *exec.Cmd
	grpc  string
	admin string
}

func startChild(podsFile, suffix string) (*proc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find own binary: %w", err)
	}
	cmd := exec.Command(exe, "--api-group-suffix="+suffix)
	cmd.Env = append(os.Environ(), childEnv+"="+podsFile)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("child stdout: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start child: %w", err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		return nil, fmt.Errorf("child did not report its addresses: %w", err)
	}
	var p proc
	p.cmd = cmd
	if _, err := fmt.Sscanf(line, "grpc=%s admin=%s", &p.grpc, &p.admin); err != nil {
		_ = cmd.Process.Kill()
		return nil, fmt.Errorf("child said %q: %w", line, err)
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get("http://" + p.admin + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return &p, nil
			}
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, errors.New("child scaler not ready after 60s")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (p *proc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}

// cpuSeconds is the user+system CPU the process has used.
func (p *proc) cpuSeconds() (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0, fmt.Errorf("read child stat: %w", err)
	}
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	utime, err1 := strconv.ParseFloat(fields[11], 64) // field 14 of the whole line
	stime, err2 := strconv.ParseFloat(fields[12], 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("parse child stat: %w", err)
	}
	return (utime + stime) / 100, nil // USER_HZ is 100 on Linux
}

func (p *proc) rssKiB() (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0, fmt.Errorf("read child status: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			return strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
		}
	}
	return 0, errors.New("no VmRSS in child status")
}

// metric reads the first sample of name from the child's /metrics,
// whatever its labels (the scaler's carry ebb_instance).
func (p *proc) metric(name string) (float64, error) {
	resp, err := http.Get("http://" + p.admin + "/metrics")
	if err != nil {
		return 0, fmt.Errorf("scrape: %w", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), name)
		if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		return strconv.ParseFloat(rest[strings.LastIndexByte(rest, ' ')+1:], 64)
	}
	return 0, fmt.Errorf("no %s in /metrics", name)
}

func percentile(d []time.Duration, p float64) time.Duration {
	slices.Sort(d)
	return d[int(math.Ceil(p*float64(len(d))))-1]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }

func run(f benchFlags) error {
	if err := raiseFileLimit(); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "starting %d sidecars...\n", f.sidecars)
	pods, stopSidecars, err := sidecars(f.sidecars, f.apps)
	if err != nil {
		return err
	}
	defer stopSidecars()
	podsFile, err := os.CreateTemp("", "ebb-bench-pods-*.json")
	if err != nil {
		return fmt.Errorf("pods file: %w", err)
	}
	defer os.Remove(podsFile.Name())
	if err := json.NewEncoder(podsFile).Encode(pods); err != nil {
		return fmt.Errorf("write pods file: %w", err)
	}
	podsFile.Close()

	// Baseline: the same process and fake API objects, but a group suffix
	// that selects no pod, so the difference is the scaler's own cost.
	fmt.Fprintln(os.Stderr, "baseline scaler (no app)...")
	base, err := startChild(podsFile.Name(), "none.example.com")
	if err != nil {
		return err
	}
	time.Sleep(f.warmup)
	baseRSS, err := base.rssKiB()
	base.stop()
	if err != nil {
		return err
	}

	fmt.Fprintln(os.Stderr, "scaler reading every sidecar...")
	p, err := startChild(podsFile.Name(), "ebb.dev")
	if err != nil {
		return err
	}
	defer p.stop()
	time.Sleep(f.warmup)
	cpu0, err := p.cpuSeconds()
	if err != nil {
		return err
	}
	tickSum0, _ := p.metric("ebb_scaler_tick_duration_seconds_sum")
	tickN0, _ := p.metric("ebb_scaler_tick_duration_seconds_count")
	errs0, _ := p.metric("ebb_scaler_sidecar_read_errors_total")
	t0 := time.Now()
	time.Sleep(f.measure)
	cpu1, err := p.cpuSeconds()
	if err != nil {
		return err
	}
	wall := time.Since(t0).Seconds()
	tickSum1, _ := p.metric("ebb_scaler_tick_duration_seconds_sum")
	tickN1, _ := p.metric("ebb_scaler_tick_duration_seconds_count")
	errs1, _ := p.metric("ebb_scaler_sidecar_read_errors_total")
	podsRead, _ := p.metric("ebb_scaler_sidecar_pods")
	rss, err := p.rssKiB()
	if err != nil {
		return err
	}
	cores := (cpu1 - cpu0) / wall

	conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("dial scaler: %w", err)
	}
	defer conn.Close()
	es := externalscaler.NewExternalScalerClient(conn)
	ctx := context.Background()
	fmt.Fprintln(os.Stderr, "GetMetrics...")
	lat := make([]time.Duration, 0, f.getMetricsCalls)
	for i := range f.getMetricsCalls {
		req := &externalscaler.GetMetricsRequest{MetricName: fmt.Sprintf("ebb-concurrency-app-%04d", i%f.apps), ScaledObjectRef: &externalscaler.ScaledObjectRef{
			Name: "so", Namespace: ns, ScalerMetadata: map[string]string{"app": fmt.Sprintf("app-%04d", i%f.apps), "targetConcurrency": "10"}}}
		start := time.Now()
		if _, err := es.GetMetrics(ctx, req); err != nil {
			return fmt.Errorf("GetMetrics: %w", err)
		}
		lat = append(lat, time.Since(start))
	}
	gmP50, gmP99 := percentile(lat, .5), percentile(lat, .99)

	fmt.Fprintln(os.Stderr, "held pushes...")
	pushP50, pushP99, err := pushLatency(ctx, es, p.grpc, f)
	if err != nil {
		return err
	}

	tickMean := time.Duration(0)
	if tickN1 > tickN0 {
		tickMean = time.Duration((tickSum1 - tickSum0) / (tickN1 - tickN0) * float64(time.Second))
	}
	perApp := (rss - baseRSS) / float64(f.apps)
	verdict := func(ok bool) string {
		if ok {
			return "✅"
		}
		return "❌"
	}
	fmt.Printf("| ebb-scaler (%d sidecars, %d apps, 1 s tick, %d cores) | measured | target | |\n|---|---|---|---|\n", f.sidecars, f.apps, runtimeCPUs())
	fmt.Printf("| sidecars read per tick | %.0f (mean tick %s, %.0f read errors in %.0f s) | all, no sampling | %s |\n", podsRead, ms(tickMean), errs1-errs0, wall, verdict(int(podsRead) == f.sidecars && errs1 == errs0))
	fmt.Printf("| scaler CPU (user+sys of its process, /proc) | %.3f core | ≤ 0.5 core | %s |\n", cores, verdict(cores <= 0.5))
	fmt.Printf("| GetMetrics, %d calls over %d apps | p50 %s, p99 %s | p99 ≤ 5 ms | %s |\n", f.getMetricsCalls, f.apps, ms(gmP50), ms(gmP99), verdict(gmP99 <= 5*time.Millisecond))
	fmt.Printf("| first held request → StreamIsActive push, %d pushes | p50 %s, p99 %s | p99 ≤ 20 ms | %s |\n", f.pushes, ms(pushP50), ms(pushP99), verdict(pushP99 <= 20*time.Millisecond))
	fmt.Printf("| scaler RSS | %.1f MiB (%.1f MiB with no app) | reported | |\n", rss/1024, baseRSS/1024)
	fmt.Printf("| scaler RSS per app (%d pods each, kept-alive connections included) | %.1f KiB | reported | |\n", f.sidecars/f.apps, perApp)
	if f.smoke {
		switch {
		case int(podsRead) != f.sidecars:
			return fmt.Errorf("smoke: the scaler reads %.0f sidecars, want %d", podsRead, f.sidecars)
		case errs1 != errs0:
			return fmt.Errorf("smoke: %.0f sidecar read errors", errs1-errs0)
		case tickN1 <= tickN0:
			return errors.New("smoke: no tick while measuring")
		}
	}
	return nil
}

// pushLatency opens a StreamIsActive per cold app (as KEDA does per
// ScaledObject) and times an activator's first held request to the stream's
// true, then releases it. Released requests keep an app active for its
// rate window (the shortest, a tick, here), so the stream's false is
// awaited only before the app's next push, the other apps' pushes between.
func pushLatency(ctx context.Context, es externalscaler.ExternalScalerClient, addr string, f benchFlags) (time.Duration, time.Duration, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	streams := make([]grpc.ServerStreamingClient[externalscaler.IsActiveResponse], f.coldApps)
	for i := range streams {
		st, err := es.StreamIsActive(ctx, &externalscaler.ScaledObjectRef{Name: "so", Namespace: ns,
			ScalerMetadata: map[string]string{"app": fmt.Sprintf("cold-%03d", i), "targetConcurrency": "10", "rateWindow": "1s"}})
		if err != nil {
			return 0, 0, fmt.Errorf("StreamIsActive: %w", err)
		}
		if r, err := st.Recv(); err != nil || r.Result {
			return 0, 0, fmt.Errorf("cold app stream starts %v, %v; want false", r.GetResult(), err)
		}
		streams[i] = st
	}
	c, err := holdpush.NewClient(holdpush.ClientOptions{Activator: "ebb-system/activator-bench"})
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()
	c.SetAddresses([]string{addr})
	expect := func(st grpc.ServerStreamingClient[externalscaler.IsActiveResponse], want bool) error {
		r, err := st.Recv()
		if err != nil {
			return fmt.Errorf("stream: %w", err)
		}
		if r.Result != want {
			return fmt.Errorf("stream sent %v, want %v", r.Result, want)
		}
		return nil
	}
	lat := make([]time.Duration, 0, f.pushes)
	released := make([]bool, f.coldApps)
	for i := range f.pushes {
		app := holdpush.App{Namespace: ns, Name: fmt.Sprintf("cold-%03d", i%f.coldApps)}
		st := streams[i%f.coldApps]
		if released[i%f.coldApps] {
			if err := expect(st, false); err != nil {
				return 0, 0, err
			}
		}
		start := time.Now()
		c.Set(app, 1)
		if err := expect(st, true); err != nil {
			return 0, 0, err
		}
		lat = append(lat, time.Since(start))
		c.Set(app, 0)
		released[i%f.coldApps] = true
	}
	return percentile(lat, .5), percentile(lat, .99), nil
}

// child runs the scaler on a fake API holding one pod per simulated sidecar.
func child(podsFile string, args []string) error {
	if err := raiseFileLimit(); err != nil {
		return err
	}
	b, err := os.ReadFile(podsFile)
	if err != nil {
		return fmt.Errorf("read pods: %w", err)
	}
	var pods []podSpec
	if err := json.Unmarshal(b, &pods); err != nil {
		return fmt.Errorf("parse pods: %w", err)
	}
	always := corev1.ContainerRestartPolicyAlways
	objs := make([]runtime.Object, 0, len(pods))
	for i, p := range pods {
		objs = append(objs, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%05d", i), Namespace: ns, Labels: map[string]string{"ebb.dev/app": p.App}},
			Spec: corev1.PodSpec{
				InitContainers: []corev1.Container{{Name: scaler.SidecarContainer, RestartPolicy: &always, Ports: []corev1.ContainerPort{{Name: scaler.AdminPortName, ContainerPort: int32(p.Port)}}}},
				Containers:     []corev1.Container{{Name: "app", Image: "example.com/app:1"}},
			},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1", Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
		})
	}
	opts, err := scaler.ParseOptions(append([]string{"--grpc-addr=127.0.0.1:0", "--admin-addr=127.0.0.1:0"}, args...), func(string) string { return "" })
	if err != nil {
		return err
	}
	opts.Client = fake.NewClientset(objs...)
	log := logr.Discard()
	opts.Logger = &log
	s, err := scaler.New(opts)
	if err != nil {
		return err
	}
	fmt.Printf("grpc=%s admin=%s\n", s.GRPCAddr(), s.AdminAddr())
	ctx, stop := signalContext()
	defer stop()
	return s.Run(ctx)
}
