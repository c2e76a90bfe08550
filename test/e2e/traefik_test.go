package e2e

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/test/cluster"
	"github.com/ebb-dev/ebb/test/e2e/install"
	"github.com/ebb-dev/ebb/test/fleet"
	"github.com/ebb-dev/ebb/test/repo"
)

// readmeTraefikSection is the README's section whose examples the tests
// apply: an Ingress of Traefik's class and an HTTPRoute on Traefik's
// Gateway for the README's app (hello in namespace shop, its Service's
// port 80), each the only place its host is written.
const readmeTraefikSection = "\n## Behind an ingress or Gateway\n"

// traefikExamples returns the first two YAML blocks of the README's section
// "Behind an ingress or Gateway", by kind: the Ingress, then the HTTPRoute,
// as a user copies them.
func traefikExamples(t *testing.T) map[string]string {
	t.Helper()
	return readmeExamples(t, readmeTraefikSection, "Ingress", "HTTPRoute")
}

// readmeExamples returns the first YAML blocks of the README's section
// under heading ("\n## Title\n"), one per kind in the order given, by kind,
// each checked to hold an object of its kind, as a user copies them.
func readmeExamples(t *testing.T, heading string, kinds ...string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repo.MustRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	title := strings.TrimSpace(heading)
	_, section, ok := strings.Cut(string(b), heading)
	if !ok {
		t.Fatalf("README.md has no section %q", title)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	out := map[string]string{}
	for _, kind := range kinds {
		_, after, ok := strings.Cut(section, "```yaml\n")
		if !ok {
			t.Fatalf("README.md's section %q has no YAML block for the %s", title, kind)
		}
		block, rest, ok := strings.Cut(after, "```")
		if !ok {
			t.Fatalf("README.md's %s block does not end", kind)
		}
		if !strings.Contains(block, "\nkind: "+kind+"\n") {
			t.Fatalf("README.md's section %q: its YAML block %d is not the %s:\n%s", title, len(out)+1, kind, block)
		}
		out[kind], section = block, rest
	}
	return out
}

// routeFor is the example of kind for app name in namespace ns with host,
// checked to name the README's app, its namespace and its host where this
// test replaces them.
func routeFor(t *testing.T, example, ns, name, host string) string {
	t.Helper()
	for _, s := range []string{"name: hello", "namespace: shop", "hello.example.com"} {
		if !strings.Contains(example, s) {
			t.Fatalf("the example no longer has %q: update this test's replacements\n%s", s, example)
		}
	}
	text := strings.ReplaceAll(example, "hello.example.com", host)
	text = strings.ReplaceAll(text, "namespace: shop", "namespace: "+ns)
	return strings.ReplaceAll(text, "name: hello", "name: "+name)
}

// behind is an app at zero reached through Traefik: Host is the host
// written only in its Ingress or HTTPRoute (Kind, named as the app).
type behind struct {
	*install.AppAtZero
	Kind string
}

// source is how the AppRoute's status.hostSources names the app's route.
func (b *behind) source() string { return b.Kind + "/" + b.Name }

// deployBehindTraefik deploys an app at zero without the hosts annotation,
// marks its Service h2c for Traefik when h2c is set (the Ingress
// provider's Service annotation, the Gateway API's appProtocol), and
// applies its route of kind from example, naming host.
func deployBehindTraefik(ctx context.Context, ns, name, kind, example, host string, s install.Scaling, h2c bool) (*behind, error) {
	a, err := ebb.DeployAtZeroWith(ctx, lc, ns, name, s, ebb.NoHosts, logf)
	if err != nil {
		return nil, fmt.Errorf("%s/%s: %w", ns, name, err)
	}
	a.Host = host
	if h2c {
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			svc, err := lc.Client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			switch kind {
			case "Ingress":
				metav1.SetMetaDataAnnotation(&svc.ObjectMeta, "traefik.ingress.kubernetes.io/service.serversscheme", "h2c")
			case "HTTPRoute":
				svc.Spec.Ports[0].AppProtocol = ptr.To("kubernetes.io/h2c")
			}
			_, err = lc.Client.CoreV1().Services(ns).Update(ctx, svc, metav1.UpdateOptions{})
			return err
		}); err != nil {
			return nil, fmt.Errorf("mark Service %s/%s h2c: %w", ns, name, err)
		}
	}
	if _, err := install.Apply(ctx, lc, example); err != nil {
		return nil, err
	}
	logf("%s/%s at zero behind its %s for %s", ns, name, kind, host)
	return &behind{AppAtZero: a, Kind: kind}, nil
}

// traefikNotFound tells Traefik's own 404 (no router matches the request
// yet: the route is not in its configuration) from any other answer; ebb's
// activator names the host in its 404.
func traefikNotFound(r install.Result) bool {
	return r.Err == nil && r.Status == http.StatusNotFound && r.Body == "404 page not found"
}

// traefikURL is path on Traefik's web entrypoint.
func traefikURL(path string) string { return "http://" + lc.TraefikAddr + path }

// getThroughTraefik sends GET path for host through Traefik, again while
// Traefik answers its own 404 (its configuration does not have the route
// yet; such a request reaches nothing of ebb's), and returns the first
// other answer and how many 404s came before it.
func getThroughTraefik(ctx context.Context, client *http.Client, host, path string) (install.Result, int) {
	deadline := time.Now().Add(30 * time.Second)
	for n := 0; ; n++ {
		r := install.Get(ctx, client, traefikURL(path), host)
		if !traefikNotFound(r) || time.Now().After(deadline) || ctx.Err() != nil {
			return r, n
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// lastHop is the last address of X-Forwarded-For in the test app's
// /headers answer: the peer of the hop before the app's sidecar. Through
// Traefik straight to the sidecar it is Traefik's; through an activator,
// the activator pod's.
func lastHop(body string) string {
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, "X-Forwarded-For: "); ok {
			hops := strings.Split(v, ",")
			return strings.TrimSpace(hops[len(hops)-1])
		}
	}
	return ""
}

// activatorIPs are the addresses of the release's activator pods.
func activatorIPs(t *testing.T) (map[string]bool, []corev1.Pod) {
	t.Helper()
	pods, err := ebb.ActivatorPods(t.Context(), lc)
	if err != nil {
		t.Fatal(err)
	}
	ips := map[string]bool{}
	for _, p := range pods {
		ips[p.Status.PodIP] = true
	}
	return ips, pods
}

// waitTraefikDirect waits until 5 requests in a row through Traefik for
// host reach the app without passing an activator, and returns how long
// that took.
func waitTraefikDirect(ctx context.Context, host string, activators map[string]bool) (time.Duration, error) {
	client := &http.Client{Timeout: 10 * time.Second}
	begin := time.Now()
	inARow := 0
	var last install.Result
	err := cluster.WaitFor(ctx, 30*time.Second, "Traefik to send "+host+" to the app's pods only", func(ctx context.Context) (bool, error) {
		last = install.Get(ctx, client, traefikURL("/headers"), host)
		if last.Err != nil || last.Status != http.StatusOK || activators[lastHop(last.Body)] {
			inARow = 0
			return false, nil
		}
		inARow++
		return inARow == 5, nil
	})
	if err != nil {
		return 0, fmt.Errorf("%w (last answer: %d %q %v)", err, last.Status, last.Body, last.Err)
	}
	return time.Since(begin), nil
}

// traefikConns counts Traefik's established TCP connections to ips (its
// keep-alive connections to backends), as ss shows them on the node,
// where Traefik runs.
func traefikConns(ips map[string]bool) (int, error) {
	out, err := exec.Command("ss", "-Htnp", "state", "established").Output()
	if err != nil {
		return 0, fmt.Errorf("ss: %w", err)
	}
	n := 0
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 || !strings.Contains(line, `"traefik"`) {
			continue
		}
		if host, _, err := net.SplitHostPort(f[3]); err == nil && ips[host] {
			n++
		}
	}
	return n, nil
}

// podIPs are the addresses of the app's pods.
func podIPs(t *testing.T, a *install.AppAtZero) map[string]bool {
	t.Helper()
	pods, err := ebb.PodsOf(t.Context(), lc, a.Namespace, a.Name)
	if err != nil {
		t.Fatal(err)
	}
	ips := map[string]bool{}
	for _, p := range pods {
		if p.Status.PodIP != "" {
			ips[p.Status.PodIP] = true
		}
	}
	return ips
}

// podNames are the names of the app's pods.
func podNames(t *testing.T, a *install.AppAtZero) map[string]bool {
	t.Helper()
	pods, err := ebb.PodsOf(t.Context(), lc, a.Namespace, a.Name)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, p := range pods {
		names[p.Name] = true
	}
	return names
}

// waitColdStart waits up to 15 s for the app's status.lastColdStart of a
// cold start that began at most a second before sent: the request sent
// then found the app at zero.
func waitColdStart(ctx context.Context, a *install.AppAtZero, sent time.Time) (*routingv1alpha1.ColdStart, error) {
	var cs *routingv1alpha1.ColdStart
	err := cluster.WaitFor(ctx, 15*time.Second, "status.lastColdStart of "+a.Namespace+"/"+a.Name, func(ctx context.Context) (bool, error) {
		r, err := ebb.AppRoute(ctx, lc, a.Namespace, a.Name)
		if err != nil || r.Status.LastColdStart == nil || r.Status.LastColdStart.Began.Time.Before(sent.Add(-time.Second)) {
			return false, nil
		}
		cs = r.Status.LastColdStart
		return true, nil
	})
	return cs, err
}

// waitAtZeroForTraefik waits until the app is at zero (install.WaitAtZero)
// and then Traefik's throttle (providersThrottleDuration, 2 s) and a
// second: Traefik's configuration then has the hand-off slice, as a
// user's request some time after the app went to zero finds it.
func waitAtZeroForTraefik(t *testing.T, a *install.AppAtZero) {
	t.Helper()
	if err := ebb.WaitAtZero(t.Context(), lc, a, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
}

// TestBehindTraefik: ebb behind a real ingress controller, Traefik v3 with
// its Kubernetes Ingress and Gateway API providers, as a user installs it
// (no ebb-specific setting): apps whose only host is written in their
// Ingress or their HTTPRoute, the README's examples (traefikExamples) as
// applied to each app. For each kind (subtests Ingress and HTTPRoute):
//
//   - the AppRoute takes the host from the route and says so
//     (spec.hostPaths, status.hostSources), and a request through Traefik
//     for that host wakes the app from zero;
//   - 500 concurrent requests and a WebSocket through Traefik at zero are
//     all answered by the app;
//   - a request every 20 ms through Traefik while the app goes
//     0 → 1 → 3 → 1 → 0 → 1 loses none; after the app's first pod is
//     ready, Traefik stops sending through the activator within 10 s of
//     the hand-off slice's removal (the activators' warm-path counter and
//     each request's X-Forwarded-For tell); a WebSocket through Traefik
//     to the warm app echoes; once traffic stops, Idle turns True, the
//     hand-off slice is published beside the pod (so Traefik, which stops
//     sending to a terminating endpoint at once, has the activators when
//     the pod goes), and the app goes to zero while Traefik holds
//     keep-alive connections to it;
//   - gRPC through Traefik (the Service marked h2c, as Traefik asks) at
//     zero and warm, the warm call counted by the sidecar.
//
// Then the figures, side by side in the same run: cold starts through
// Traefik and straight to the Service, interleaved (ColdStartFigure); warm
// latency through Traefik with and without ebb's sidecar
// (WarmLatencyFigure).
func TestBehindTraefik(t *testing.T) {
	if lc.TraefikAddr == "" {
		t.Fatal("the suite's cluster runs without Traefik (cluster.Options.Traefik)")
	}
	ctx := t.Context()
	examples := traefikExamples(t)

	const figNS = "e2e-traefik-figure"
	namespaces := []string{"e2e-traefik-ingress", "e2e-traefik-httproute", figNS}
	t.Cleanup(func() {
		for _, ns := range namespaces {
			if err := lc.Client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}); err != nil {
				t.Logf("delete namespace %s: %v", ns, err)
			}
		}
	})
	t.Cleanup(func() {
		if t.Failed() {
			for _, ns := range namespaces {
				dumpState(t, ns)
				dumpRoutes(t, ns)
			}
			t.Logf("Traefik's log: %s", filepath.Join(lc.Dir, "logs", "traefik.log"))
		}
	})

	// Every app at once: each DeployAtZero waits on KEDA and the
	// activators' hand-off, mostly idle time.
	zeroLoss := map[string]any{"stabilizationWindowSeconds": int64(3), "policies": []any{map[string]any{"type": "Percent", "value": int64(100), "periodSeconds": int64(1)}}}
	webScaling := install.Scaling{Max: 3, PollingInterval: 1, Cooldown: 5, TargetConcurrency: 2, RateWindow: "3s",
		HPABehavior: map[string]any{"scaleUp": zeroLoss, "scaleDown": zeroLoss}}
	type want struct {
		ns, name, kind, host string
		s                    install.Scaling
		h2c                  bool
	}
	wants := []want{
		{"e2e-traefik-ingress", "web", "Ingress", "web-ingress.example.com", webScaling, false},
		{"e2e-traefik-ingress", "grpc", "Ingress", "grpc-ingress.example.com", scaling, true},
		{"e2e-traefik-httproute", "web", "HTTPRoute", "web-httproute.example.com", webScaling, false},
		{"e2e-traefik-httproute", "grpc", "HTTPRoute", "grpc-httproute.example.com", scaling, true},
	}
	for i := range coldStartSamples {
		for _, via := range []string{"traefik", "service"} {
			name := fmt.Sprintf("%s%d", via, i+1)
			wants = append(wants, want{figNS, name, "Ingress", name + "-figure.example.com", scaling, false})
		}
	}
	apps := make([]*behind, len(wants))
	errs := make([]error, len(wants))
	var wg sync.WaitGroup
	for i, w := range wants {
		route := routeFor(t, examples[w.kind], w.ns, w.name, w.host)
		wg.Go(func() {
			apps[i], errs[i] = deployBehindTraefik(ctx, w.ns, w.name, w.kind, route, w.host, w.s, w.h2c)
		})
	}
	latency := map[string]string{}
	for _, name := range latencyApps {
		latency[name] = routeFor(t, examples["Ingress"], figNS, name, latencyHost(name))
	}
	var latencyErr error
	wg.Go(func() { latencyErr = createLatencyApps(ctx, figNS, latency) })
	wg.Wait()
	if err := errors.Join(append(errs, latencyErr)...); err != nil {
		t.Fatal(err)
	}

	for i, kind := range []string{"Ingress", "HTTPRoute"} {
		web, grpcApp := apps[2*i], apps[2*i+1]
		t.Run(kind, func(t *testing.T) {
			t.Run("WakeAndServe", func(t *testing.T) { wakeAndServeThroughTraefik(t, web) })
			t.Run("ZeroLossAndHandOff", func(t *testing.T) { zeroLossThroughTraefik(t, web) })
			t.Run("GRPC", func(t *testing.T) { grpcThroughTraefik(t, grpcApp) })
		})
	}
	t.Run("ColdStartFigure", func(t *testing.T) { coldStartThroughTraefikFigure(t, apps[4:]) })
	t.Run("WarmLatencyFigure", func(t *testing.T) { warmLatencyThroughTraefikFigure(t, figNS) })
}

// checkHostFromRoute waits until the app's AppRoute has the host of its
// route in spec.hostPaths (every path) and nowhere else, status.hostSources
// names the route as its only source, and the activators route the
// AppRoute's generation (Propagated).
func checkHostFromRoute(t *testing.T, b *behind) {
	t.Helper()
	var last string
	err := cluster.WaitFor(t.Context(), 60*time.Second, "the host of "+b.source()+" in AppRoute "+b.Namespace+"/"+b.Name, func(ctx context.Context) (bool, error) {
		r, err := ebb.AppRoute(ctx, lc, b.Namespace, b.Name)
		if err != nil {
			return false, err
		}
		last = fmt.Sprintf("spec.hosts %q, spec.hostPaths %+v, status.hostSources %+v, Propagated %+v", r.Spec.Hosts, r.Spec.HostPaths, r.Status.HostSources,
			apimeta.FindStatusCondition(r.Status.Conditions, routingv1alpha1.ConditionPropagated))
		i := slices.IndexFunc(r.Spec.HostPaths, func(h routingv1alpha1.HostPaths) bool { return h.Host == b.Host })
		j := slices.IndexFunc(r.Status.HostSources, func(h routingv1alpha1.HostSource) bool { return h.Host == b.Host })
		p := apimeta.FindStatusCondition(r.Status.Conditions, routingv1alpha1.ConditionPropagated)
		return i >= 0 && j >= 0 && p != nil && p.Status == metav1.ConditionTrue && p.ObservedGeneration >= r.Generation, nil
	})
	if err != nil {
		t.Fatalf("%v\nlast: %s", err, last)
	}
	r, err := ebb.AppRoute(t.Context(), lc, b.Namespace, b.Name)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("AppRoute %s/%s: %s", b.Namespace, b.Name, last)
	if len(r.Spec.Hosts) != 0 {
		t.Errorf("spec.hosts = %q, want none: the app has no hosts annotation", r.Spec.Hosts)
	}
	if len(r.Spec.HostPaths) != 1 {
		t.Errorf("spec.hostPaths = %+v, want only %s", r.Spec.HostPaths, b.Host)
	}
	for _, h := range r.Spec.HostPaths {
		// The route's one path is "/" (Prefix, PathPrefix): every path.
		if h.Host == b.Host && len(h.PathPrefixes) > 0 {
			t.Errorf("spec.hostPaths[%s].pathPrefixes = %q, want none (every path)", h.Host, h.PathPrefixes)
		}
	}
	want := []routingv1alpha1.HostSource{{Host: b.Host, From: []string{b.source()}}}
	if got := r.Status.HostSources; !slices.EqualFunc(got, want, func(a, b routingv1alpha1.HostSource) bool { return a.Host == b.Host && slices.Equal(a.From, b.From) }) {
		t.Errorf("status.hostSources = %+v, want %+v", got, want)
	}
}

// wakeAndServeThroughTraefik: the host written only in the route wakes the
// app through Traefik; back at zero, 500 concurrent requests and a
// WebSocket through Traefik are all answered by the app.
func wakeAndServeThroughTraefik(t *testing.T, b *behind) {
	ctx := t.Context()
	checkHostFromRoute(t, b)

	client := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	r, notFound := getThroughTraefik(ctx, client, b.Host, "/")
	if r.Err != nil || r.Status != http.StatusOK || !answeredBy(r.Body, podNames(t, b.AppAtZero)) {
		t.Fatalf("a request through Traefik for %s (after %d of Traefik's own 404s): %d %q %v, want 200 from the app's pod\n%s",
			b.Host, notFound, r.Status, r.Body, r.Err, ebb.Diagnose(ctx, lc, b.Namespace, b.Name))
	}
	cs, err := waitColdStart(ctx, b.AppAtZero, r.Sent)
	if err != nil {
		t.Fatalf("the request through Traefik answered 200 in %s, but no cold start began with it: %v", r.Took.Round(time.Millisecond), err)
	}
	t.Logf("a request through Traefik for %s (written only in %s) woke %s/%s: 200 in %s (%d of Traefik's own 404s before its configuration had the route); ebb's part %s",
		b.Host, b.source(), b.Namespace, b.Name, r.Took.Round(time.Millisecond), notFound, fleet.EbbPart(cs).Round(time.Millisecond))

	waitAtZeroForTraefik(t, b.AppAtZero)
	const n = 500
	type dialed struct {
		c    *websocket.Conn
		took time.Duration
		err  error
	}
	ws := make(chan dialed, 1)
	go func() {
		begin := time.Now()
		d := websocket.Dialer{HandshakeTimeout: 60 * time.Second}
		c, resp, err := d.DialContext(ctx, "ws://"+lc.TraefikAddr+"/ws", http.Header{"Host": {b.Host}})
		if err != nil && resp != nil {
			err = fmt.Errorf("%w (%s)", err, resp.Status)
		}
		ws <- dialed{c, time.Since(begin), err}
	}()
	begin := time.Now()
	results := install.Send(ctx, traefikURL("/"), b.Host, n, 90*time.Second)
	took := time.Since(begin)
	d := <-ws
	if d.err != nil {
		t.Errorf("a WebSocket through Traefik at zero: %v", d.err)
	} else {
		echo(t, d.c, "cold through Traefik")
		d.c.Close()
		t.Logf("a WebSocket through Traefik at zero: opened in %s, echoed", d.took.Round(time.Millisecond))
	}
	if err := install.Failures(results); err != nil {
		t.Fatalf("of %d concurrent requests through Traefik at zero, not 200:\n%v\n%s", n, err, ebb.Diagnose(ctx, lc, b.Namespace, b.Name))
	}
	names := podNames(t, b.AppAtZero)
	for _, r := range results {
		if !answeredBy(r.Body, names) {
			t.Fatalf("a 200 not from an app pod %v: %q", names, r.Body)
		}
	}
	t.Logf("%d concurrent requests through Traefik at zero: all 200 from the app's pods %v in %s", n, slices.Sorted(maps.Keys(names)), took.Round(time.Millisecond))
}

// pathSample is what the path meter saw at one moment.
type pathSample struct {
	at      time.Time
	handOff int     // ready endpoints of the app's hand-off slices
	ready   int     // ready pods of the app
	proxied float64 // the activators' ebb_activator_requests_total{outcome="proxied"}, summed
}

// The activators' warm-path counter: requests an activator forwarded at
// once to a ready pod of their app (not held).
const (
	activatorRequests = "ebb_activator_requests_total"
	proxiedOutcome    = `outcome="proxied"`
)

// meterPath samples the app's hand-off endpoints, its ready pods and the
// activators' warm-path counter every 50 ms until the returned stop is
// called, which returns the samples.
func meterPath(ctx context.Context, a *install.AppAtZero, activators []corev1.Pod) (stop func() ([]pathSample, error)) {
	ctx, cancel := context.WithCancel(ctx)
	var (
		samples []pathSample
		failed  error
		done    = make(chan struct{})
	)
	go func() {
		defer close(done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			s := pathSample{at: time.Now()}
			var err error
			if s.handOff, err = ebb.HandOffEndpoints(ctx, lc, a.Namespace, a.Name); err == nil {
				var pods []corev1.Pod
				if pods, err = ebb.PodsOf(ctx, lc, a.Namespace, a.Name); err == nil {
					for _, p := range pods {
						if p.DeletionTimestamp == nil && slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
							return c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
						}) {
							s.ready++
						}
					}
					s.proxied, err = install.ActivatorSum(ctx, activators, activatorRequests, proxiedOutcome)
				}
			}
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				failed = err
				return
			}
			samples = append(samples, s)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() ([]pathSample, error) {
		cancel()
		<-done
		return samples, failed
	}
}

// afterWarm is what passed the activators after the app's first pod was
// ready.
type afterWarm struct {
	ready, gone time.Time // the first pod ready; the hand-off slice gone after that
	proxied     int       // requests proxied by the activators since ready
	last        time.Time // the sample that first showed the last of them
}

func analyseAfterWarm(samples []pathSample) (afterWarm, error) {
	i := slices.IndexFunc(samples, func(s pathSample) bool { return s.ready > 0 })
	if i < 0 {
		return afterWarm{}, errors.New("no ready pod seen")
	}
	base := samples[max(i-1, 0)].proxied
	j := slices.IndexFunc(samples[i:], func(s pathSample) bool { return s.handOff == 0 })
	if j < 0 {
		return afterWarm{}, errors.New("the hand-off slice was not seen gone after the pod was ready")
	}
	end := samples[len(samples)-1].proxied
	w := afterWarm{ready: samples[i].at, gone: samples[i+j].at, proxied: int(end - base)}
	if w.proxied > 0 {
		k := slices.IndexFunc(samples[i:], func(s pathSample) bool { return s.proxied == end })
		w.last = samples[i+k].at
	}
	return w, nil
}

// zeroLossThroughTraefik is TestZeroLossUnderChange through Traefik, a
// request every 20 ms, with the hand-off measured at 0 → 1 and the Idle
// condition and Traefik's keep-alive connections watched at 1 → 0.
func zeroLossThroughTraefik(t *testing.T, b *behind) {
	ctx := t.Context()
	a := b.AppAtZero
	waitAtZeroForTraefik(t, a)
	activators, activatorPods := activatorIPs(t)
	slicelog, err := install.WatchSlices(ctx, lc, a.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	defer slicelog.Stop()

	var tl timeline
	tl.mark(time.Now(), "at zero; a request every 20 ms through Traefik starts")
	var most atomic.Int32
	stopReplicas := watchReplicas(ctx, a, &tl, &most)
	defer stopReplicas()
	stopMeter := meterPath(ctx, a, activatorPods)
	metering := true
	defer func() {
		if metering {
			stopMeter()
		}
	}()

	client := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	var (
		mu             sync.Mutex
		steady, bursts []install.Result
		paused         atomic.Bool
		stop           = make(chan struct{})
		loops          sync.WaitGroup
		stopped        bool
	)
	stopSteady := func() {
		if !stopped {
			stopped = true
			close(stop)
			loops.Wait()
		}
	}
	defer stopSteady()
	loops.Go(func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		var inner sync.WaitGroup
		defer inner.Wait()
		for range 10000 { // at most 200 s
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if paused.Load() {
				continue
			}
			inner.Go(func() {
				r := install.Get(ctx, client, traefikURL("/headers"), b.Host)
				mu.Lock()
				steady = append(steady, r)
				mu.Unlock()
			})
		}
	})
	fail := func(format string, args ...any) {
		t.Helper()
		stopSteady()
		t.Logf("timeline:\n%s\nEndpointSlices of %s:\n%s", tl.String(), a.Namespace, slicelog.String())
		t.Fatalf(format, args...)
	}

	// 0 → 1, and how long Traefik goes on sending through the activators.
	if err := lc.WaitReplicas(ctx, a.Namespace, a.Name, 1, 60*time.Second); err != nil {
		fail("wake: %v", err)
	}
	if err := cluster.WaitFor(ctx, 60*time.Second, "the hand-off slice of "+a.Name+" gone", func(ctx context.Context) (bool, error) {
		n, err := ebb.HandOffEndpoints(ctx, lc, a.Namespace, a.Name)
		return n == 0, err
	}); err != nil {
		fail("%v", err)
	}
	tl.mark(time.Now(), "hand-off slice gone")
	// The bound is 10 s; watch 12.
	time.Sleep(12 * time.Second)
	samples, err := stopMeter()
	metering = false
	if err != nil {
		fail("path meter: %v", err)
	}
	w, err := analyseAfterWarm(samples)
	if err != nil {
		fail("path meter: %v", err)
	}
	tl.mark(w.ready, "first pod ready (path meter)")
	tl.mark(w.gone, "hand-off slice gone (path meter)")

	// A WebSocket through Traefik to the warm app.
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
	wsc, resp, err := d.DialContext(ctx, "ws://"+lc.TraefikAddr+"/ws", http.Header{"Host": {b.Host}})
	if err != nil {
		fail("a WebSocket through Traefik to the warm app: %v (response %v)", err, resp)
	}
	echo(t, wsc, "warm through Traefik")
	wsc.Close()
	tl.mark(time.Now(), "a WebSocket through Traefik to the warm app echoed")

	// The steady requests sent since the pod was ready that passed an
	// activator (X-Forwarded-For's last hop).
	mu.Lock()
	viaActivator, lastVia := 0, time.Time{}
	for _, r := range steady {
		if r.Err == nil && !r.Sent.Before(w.ready) && activators[lastHop(r.Body)] {
			viaActivator++
			if r.Sent.After(lastVia) {
				lastVia = r.Sent
			}
		}
	}
	mu.Unlock()
	since := func(at, from time.Time) string {
		if at.IsZero() {
			return "–"
		}
		return at.Sub(from).Round(10 * time.Millisecond).String()
	}
	t.Logf("after the first pod was ready: %d request(s) proxied by the activators (their warm-path counter), the last seen %s after ready, %s after the hand-off slice was gone (ready → gone %s); %d steady request(s) sent since ready passed an activator (X-Forwarded-For), the last sent %s after the slice was gone",
		w.proxied, since(w.last, w.ready), since(w.last, w.gone), w.gone.Sub(w.ready).Round(10*time.Millisecond), viaActivator, since(lastVia, w.gone))
	fmt.Printf("FIGURE %s: requests through the activator after the app was warm: %d proxied (counter), last %s after pod ready, %s after the hand-off slice's removal; %d of the steady requests by X-Forwarded-For, last sent %s after the removal\n",
		b.Kind, w.proxied, since(w.last, w.ready), since(w.last, w.gone), viaActivator, since(lastVia, w.gone))
	const bound = 10 * time.Second
	if !w.last.IsZero() && w.last.Sub(w.gone) > bound {
		t.Errorf("Traefik sent requests through the activator %s after the hand-off slice was gone, want ≤ %s", w.last.Sub(w.gone), bound)
	}
	if !lastVia.IsZero() && lastVia.Sub(w.gone) > bound {
		t.Errorf("a steady request sent %s after the hand-off slice was gone passed an activator, want ≤ %s", lastVia.Sub(w.gone), bound)
	}

	// 1 → N: a burst of slow requests.
	burstStop := make(chan struct{})
	var burst sync.WaitGroup
	for range 8 {
		burst.Go(func() {
			for range 400 {
				select {
				case <-burstStop:
					return
				default:
				}
				r := install.Get(ctx, client, traefikURL("/?delay=300ms"), b.Host)
				mu.Lock()
				bursts = append(bursts, r)
				mu.Unlock()
			}
		})
	}
	tl.mark(time.Now(), "burst starts: 8 clients looping on 300 ms requests")
	if err := waitReplicasAtLeast(ctx, a, 2, 90*time.Second); err != nil {
		close(burstStop)
		burst.Wait()
		fail("HPA scale-up: %v", err)
	}
	time.Sleep(5 * time.Second)
	close(burstStop)
	burst.Wait()
	n := most.Load()
	tl.mark(time.Now(), fmt.Sprintf("burst stops (the HPA reached %d replicas)", n))

	// N → 1.
	if err := lc.WaitReplicas(ctx, a.Namespace, a.Name, 1, 90*time.Second); err != nil {
		fail("HPA scale-down: %v", err)
	}
	time.Sleep(2 * time.Second)

	// 1 → 0: traffic pauses; Idle turns True while Traefik keeps its
	// keep-alive connections to the pod, and KEDA takes the app to zero.
	paused.Store(true)
	pausedAt := time.Now()
	tl.mark(pausedAt, "steady traffic pauses")
	ips := podIPs(t, a)
	var idle *metav1.Condition
	if err := cluster.WaitFor(ctx, 60*time.Second, "Idle True on AppRoute "+a.Namespace+"/"+a.Name, func(ctx context.Context) (bool, error) {
		r, err := ebb.AppRoute(ctx, lc, a.Namespace, a.Name)
		if err != nil {
			return false, err
		}
		idle = apimeta.FindStatusCondition(r.Status.Conditions, routingv1alpha1.ConditionIdle)
		return idle != nil && idle.Status == metav1.ConditionTrue && !idle.LastTransitionTime.Time.Before(pausedAt.Truncate(time.Second)), nil
	}); err != nil {
		fail("%v (last: %+v)", err, idle)
	}
	atIdle, err := traefikConns(ips)
	if err != nil {
		fail("%v", err)
	}
	toActivators, err := traefikConns(activators)
	if err != nil {
		fail("%v", err)
	}
	idleAt := time.Now()
	tl.mark(idleAt, fmt.Sprintf("Idle True (%s): Traefik holds %d keep-alive connection(s) to the app's pods, %d to the activators", idle.Reason, atIdle, toActivators))
	if atIdle == 0 {
		t.Errorf("Traefik held no connection to the app's pods %v when Idle turned True: the test does not show that its keep-alive connections leave the app idle", slices.Sorted(maps.Keys(ips)))
	}
	// The hand-off slice is published once the app is Idle, before KEDA
	// takes it to zero: Traefik stops sending to a terminating endpoint at
	// once and applies the next change of its configuration only after
	// its providersThrottleDuration (2 s), so a slice published after the
	// last pod's endpoint turned terminating left it without a server
	// ("503 no available server") for up to 2 s.
	var published time.Time
	if err := cluster.WaitFor(ctx, 30*time.Second, "the hand-off slice of idle "+a.Name, func(ctx context.Context) (bool, error) {
		n, err := ebb.HandOffEndpoints(ctx, lc, a.Namespace, a.Name)
		published = time.Now()
		return n > 0, err
	}); err != nil {
		fail("%v", err)
	}
	tl.mark(published, "hand-off slice published")
	if err := lc.WaitReplicas(ctx, a.Namespace, a.Name, 0, 90*time.Second); err != nil {
		fail("scale to zero while Traefik holds keep-alive connections: %v", err)
	}
	zeroAt := time.Now()
	atZero, err := traefikConns(ips)
	if err != nil {
		fail("%v", err)
	}
	handOff, err := ebb.HandOffEndpoints(ctx, lc, a.Namespace, a.Name)
	if err != nil {
		fail("%v", err)
	}
	tl.mark(zeroAt, fmt.Sprintf("replicas 0: Traefik holds %d keep-alive connection(s) to the app's pods; %d hand-off endpoint(s)", atZero, handOff))
	if handOff == 0 {
		t.Errorf("the hand-off slice, published %s after Idle turned True, was gone when KEDA set replicas to 0", published.Sub(idleAt).Round(10*time.Millisecond))
	}
	fmt.Printf("FIGURE %s: Traefik's keep-alive connections: %d to the app's pods when Idle turned True %s after traffic stopped, %d when KEDA set replicas to 0; %d to the activators (left from the cold starts); the hand-off slice seen %s after Idle turned True, %s before replicas 0\n",
		b.Kind, atIdle, idleAt.Sub(pausedAt).Round(100*time.Millisecond), atZero, toActivators, published.Sub(idleAt).Round(10*time.Millisecond), zeroAt.Sub(published).Round(100*time.Millisecond))

	// 0 → 1 again: traffic resumes at once, onto the draining pod or the
	// activators.
	paused.Store(false)
	tl.mark(time.Now(), "steady traffic resumes")
	time.Sleep(5 * time.Second)
	stopSteady()
	tl.mark(time.Now(), "steady traffic stops")

	mu.Lock()
	all := append(slices.Clone(steady), bursts...)
	mu.Unlock()
	t.Logf("timeline:\n%s", tl.String())
	t.Logf("EndpointSlices of %s around replicas 0 (%s):\n%s", a.Namespace, zeroAt.Format("15:04:05.000"), slicesAround(slicelog.String(), zeroAt, 3*time.Second))
	var lost []install.Result
	for _, r := range all {
		if r.Err != nil || r.Status != http.StatusOK {
			lost = append(lost, r)
		}
	}
	fmt.Printf("FIGURE %s: zero loss through Traefik (0→1→%d→1→0→1, a request every 20 ms): lost %d of %d (%d steady, %d burst)\n",
		b.Kind, n, len(lost), len(all), len(steady), len(bursts))
	if len(lost) > 0 {
		first, last := lost[0].Sent, lost[0].Sent
		for _, r := range lost {
			if r.Sent.Before(first) {
				first = r.Sent
			}
			if r.Sent.After(last) {
				last = r.Sent
			}
		}
		t.Errorf("not 200 through Traefik while the app went 0→1→N→1→0→1, sent %s to %s after replicas 0:\n%v\nEndpointSlices of %s:\n%s",
			first.Sub(zeroAt).Round(10*time.Millisecond), last.Sub(zeroAt).Round(10*time.Millisecond), install.Failures(lost), a.Namespace, slicelog.String())
	}
	if n < 2 {
		t.Errorf("the HPA reached %d replicas, want N ≥ 2", n)
	}
}

// slicesAround keeps the lines of a SliceLog (each begins with its time of
// day) within d of at: how the app's endpoints and the hand-off slice
// moved at 1 → 0.
func slicesAround(log string, at time.Time, d time.Duration) string {
	var keep []string
	for _, line := range strings.Split(log, "\n") {
		first, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		tod, err := time.ParseInLocation("15:04:05.000", first, at.Location())
		if err != nil {
			continue
		}
		when := time.Date(at.Year(), at.Month(), at.Day(), tod.Hour(), tod.Minute(), tod.Second(), tod.Nanosecond(), at.Location())
		if when.Sub(at).Abs() <= d {
			keep = append(keep, line)
		}
	}
	return strings.Join(keep, "\n")
}

// grpcThroughTraefik: gRPC through Traefik to an app at zero (three
// concurrent RPCs on one connection, held by the activator), then, once
// Traefik sends to the pod, a warm RPC on a new connection, counted by
// the sidecar.
func grpcThroughTraefik(t *testing.T, b *behind) {
	ctx := t.Context()
	checkHostFromRoute(t, b)
	dial := func() *grpc.ClientConn {
		t.Helper()
		conn, err := grpc.NewClient("passthrough:///"+lc.TraefikAddr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithAuthority(b.Host))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	cold := dial()
	begin := time.Now()
	errs := make([]error, 3)
	notFound := make([]int, 3)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Go(func() {
			// Again while Traefik answers its own 404 (its configuration
			// does not have the route yet).
			for deadline := time.Now().Add(30 * time.Second); ; notFound[i]++ {
				errs[i] = checkHealth(ctx, cold, fmt.Sprintf("cold-%d", i))
				if errs[i] == nil || !strings.Contains(errs[i].Error(), "404") || time.Now().After(deadline) {
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	answered := time.Now()
	for i, err := range errs {
		if err != nil {
			t.Errorf("cold RPC %d through Traefik: %v", i, err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	if _, err := waitColdStart(ctx, b.AppAtZero, begin); err != nil {
		t.Fatalf("the RPCs were answered, but no cold start began with them: %v", err)
	}
	t.Logf("cold: 3 concurrent RPCs on one connection through Traefik woke %s/%s and were answered in %s (Traefik's own 404s before: %v)",
		b.Namespace, b.Name, answered.Sub(begin).Round(time.Millisecond), notFound)

	activators, _ := activatorIPs(t)
	if _, err := waitTraefikDirect(ctx, b.Host, activators); err != nil {
		t.Fatal(err)
	}
	t.Logf("Traefik sends %s to the pod only (h2c to the sidecar) %s after the cold RPCs were answered", b.Host, time.Since(answered).Round(time.Millisecond))
	ips := podIPs(t, b.AppAtZero)
	if len(ips) != 1 {
		t.Fatalf("pods %v, want one", ips)
	}
	pod := slices.Collect(maps.Keys(ips))[0]
	before := sidecarStats(t, pod)
	if err := checkHealth(ctx, dial(), "warm"); err != nil {
		t.Fatalf("warm RPC through Traefik: %v", err)
	}
	if after := sidecarStats(t, pod); after.Total != before.Total+1 {
		t.Errorf("the sidecar counted %d requests for one warm RPC through Traefik (total %d → %d)", after.Total-before.Total, before.Total, after.Total)
	}
}

// coldStartSamples is how many cold starts the figure takes each way.
const coldStartSamples = 5

// coldStartThroughTraefikFigure wakes apps at zero one at a time, in turn
// through Traefik and straight to the Service's ClusterIP (for its cluster
// name): the cold start a client sees and ebb's part of it
// (status.lastColdStart), medians of each way, and their ratios.
func coldStartThroughTraefikFigure(t *testing.T, apps []*behind) {
	ctx := t.Context()
	client := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	ebbs, totals := map[string][]time.Duration{}, map[string][]time.Duration{}
	var table strings.Builder
	fmt.Fprintf(&table, "  app       via      total     ebb's part  phases (status.lastColdStart)\n")
	for _, b := range apps {
		via := "traefik"
		if strings.HasPrefix(b.Name, "service") {
			via = "service"
		}
		if err := install.WaitRoutedToActivator(ctx, b.URL, 60*time.Second); err != nil {
			t.Fatal(err)
		}
		// The wake before this one is not starting its pod any more.
		time.Sleep(time.Second)
		var r install.Result
		notFound := 0
		if via == "traefik" {
			r, notFound = getThroughTraefik(ctx, client, b.Host, "/")
		} else {
			r = install.Get(ctx, client, b.URL, b.Name+"."+b.Namespace+".svc.cluster.local")
		}
		if r.Err != nil || r.Status != http.StatusOK {
			t.Fatalf("wake %s/%s via %s: %d %q %v", b.Namespace, b.Name, via, r.Status, r.Body, r.Err)
		}
		cs, err := waitColdStart(ctx, b.AppAtZero, r.Sent)
		if err != nil {
			t.Fatal(err)
		}
		if missing := fleet.MissingEbbPhases(cs); len(missing) > 0 {
			t.Fatalf("the cold start of %s/%s has no phases %v: %+v", b.Namespace, b.Name, missing, cs)
		}
		ebbs[via], totals[via] = append(ebbs[via], fleet.EbbPart(cs)), append(totals[via], r.Took)
		fmt.Fprintf(&table, "  %-8s  %-7s  %8s  %10s ", b.Name, via, r.Took.Round(time.Millisecond), fleet.EbbPart(cs).Round(time.Millisecond))
		for _, p := range cs.Phases {
			fmt.Fprintf(&table, " %s %s", p.Name, p.Duration.Duration.Round(time.Millisecond))
		}
		if notFound > 0 {
			fmt.Fprintf(&table, "  (after %d of Traefik's own 404s)", notFound)
		}
		table.WriteString("\n")
	}
	t.Logf("cold starts, interleaved:\n%s", table.String())
	ratio := func(a, b time.Duration) string {
		if b == 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f", float64(a)/float64(b))
	}
	et, es, tt, ts := median(ebbs["traefik"]), median(ebbs["service"]), median(totals["traefik"]), median(totals["service"])
	fmt.Printf("FIGURE cold start through Traefik ÷ straight to the Service (medians of %d each, interleaved): ebb's part %s ÷ %s = %s; total %s ÷ %s = %s\n",
		len(ebbs["traefik"]), et.Round(time.Millisecond), es.Round(time.Millisecond), ratio(et, es), tt.Round(time.Millisecond), ts.Round(time.Millisecond), ratio(tt, ts))
}

// latencyApps are the two Deployments of the warm latency figure, both of
// the test app at one replica behind an Ingress of their own: "sidecar",
// an app ebb injects, and "plain", without the app label, which ebb
// leaves alone.
var latencyApps = []string{"sidecar", "plain"}

// latencyHost is the host of a latency app's Ingress.
func latencyHost(name string) string { return name + "-latency.example.com" }

// latencyLabels select a latency app's pods.
func latencyLabels(name string) map[string]string {
	if name == "plain" {
		return map[string]string{"app": name}
	}
	return map[string]string{ebb.Names.AppLabel(): name}
}

// createLatencyApps creates the latency apps' Services, Deployments and
// Ingresses (examples, one per app), without waiting for them.
func createLatencyApps(ctx context.Context, ns string, examples map[string]string) error {
	if err := lc.EnsureNamespace(ctx, ns, ebb.OptIn()); err != nil {
		return err
	}
	for _, name := range latencyApps {
		d := ebb.App(ns, name, "", 1)
		ebb.NoHosts(d)
		svc := ebb.Service(ns, name)
		d.Spec.Selector.MatchLabels, d.Spec.Template.Labels, svc.Spec.Selector = latencyLabels(name), latencyLabels(name), latencyLabels(name)
		if _, err := lc.Client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create Service %s/%s: %w", ns, name, err)
		}
		if _, err := lc.Client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create Deployment %s/%s: %w", ns, name, err)
		}
		if _, err := install.Apply(ctx, lc, examples[name]); err != nil {
			return err
		}
	}
	return nil
}

// warmLatencyThroughTraefikFigure: the same test app, warm, behind its own
// Ingress, with ebb's sidecar and without (latencyApps): sequential
// requests through Traefik to each, interleaved, p50 and p99 of each and
// the difference, the sidecar's cost behind an ingress.
func warmLatencyThroughTraefikFigure(t *testing.T, ns string) {
	ctx := t.Context()
	clients := map[string]*http.Client{}
	for _, name := range latencyApps {
		if err := install.WaitDeploymentReady(ctx, lc, ns, name, 2*time.Minute); err != nil {
			t.Fatal(err)
		}
		pods, err := lc.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(&metav1.LabelSelector{MatchLabels: latencyLabels(name)})})
		if err != nil {
			t.Fatal(err)
		}
		if len(pods.Items) != 1 || (len(pods.Items[0].Spec.InitContainers) > 0) != (name == "sidecar") {
			t.Fatalf("%s: want one pod, with ebb's sidecar only in the app ebb injects; got %d pods", name, len(pods.Items))
		}
		clients[name] = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
		if r, notFound := getThroughTraefik(ctx, clients[name], latencyHost(name), "/"); r.Err != nil || r.Status != http.StatusOK {
			t.Fatalf("through Traefik to %s (after %d of Traefik's own 404s): %d %q %v", name, notFound, r.Status, r.Body, r.Err)
		}
	}
	activators, _ := activatorIPs(t)
	if _, err := waitTraefikDirect(ctx, latencyHost("sidecar"), activators); err != nil {
		t.Fatal(err)
	}
	const warmup, n = 50, 1000
	took := map[string][]time.Duration{}
	for i := range warmup + n {
		for _, name := range latencyApps {
			r := install.Get(ctx, clients[name], traefikURL("/"), latencyHost(name))
			if r.Err != nil || r.Status != http.StatusOK {
				t.Fatalf("request %d through Traefik to %s: %d %q %v", i, name, r.Status, r.Body, r.Err)
			}
			if i >= warmup {
				took[name] = append(took[name], r.Took)
			}
		}
	}
	pct := func(d []time.Duration, p float64) time.Duration {
		s := slices.Sorted(slices.Values(d))
		return s[min(len(s)-1, int(float64(len(s))*p))]
	}
	us := func(d time.Duration) string { return fmt.Sprintf("%dµs", d.Microseconds()) }
	s50, s99, p50, p99 := pct(took["sidecar"], 0.50), pct(took["sidecar"], 0.99), pct(took["plain"], 0.50), pct(took["plain"], 0.99)
	fmt.Printf("FIGURE warm latency through Traefik, %d sequential requests each, interleaved: Traefik + sidecar + app p50 %s p99 %s; Traefik + app p50 %s p99 %s; the sidecar adds p50 %s, p99 %s\n",
		n, us(s50), us(s99), us(p50), us(p99), us(s50-p50), us(s99-p99))
}

// dumpRoutes logs the Ingresses and HTTPRoutes of ns, with Traefik's
// status of them.
func dumpRoutes(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	if l, err := lc.Client.NetworkingV1().Ingresses(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, i := range l.Items {
			y, _ := yaml.Marshal(map[string]any{"spec": i.Spec, "status": i.Status})
			t.Logf("Ingress %s/%s:\n%s", ns, i.Name, y)
		}
	}
	dyn, err := dynamic.NewForConfig(lc.RestConfig)
	if err != nil {
		return
	}
	if l, err := dyn.Resource(cluster.HTTPRoutes).Namespace(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, r := range l.Items {
			y, _ := yaml.Marshal(map[string]any{"spec": r.Object["spec"], "status": r.Object["status"]})
			t.Logf("HTTPRoute %s/%s:\n%s", ns, r.GetName(), y)
		}
	}
}
