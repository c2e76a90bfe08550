package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/sidecarapi"
	"github.com/ebb-dev/ebb/test/cluster"
	"github.com/ebb-dev/ebb/test/e2e/install"
)

// routeControlNamespace deletes the namespace when the test ends, after
// logging, if it failed, what ebb says of its apps and the namespace's
// AppRoutes, RoutePolicies and pods.
func routeControlNamespace(t *testing.T, ns string, apps ...string) {
	t.Helper()
	t.Cleanup(func() {
		ctx := context.Background()
		if t.Failed() {
			dumpState(t, ns)
			for _, app := range apps {
				t.Logf("ebb on %s/%s:\n%s", ns, app, ebb.Diagnose(ctx, lc, ns, app))
			}
			dumpRouteControls(t, ns)
			t.Logf("pods of %s:\n%s", ns, install.DescribePods(ctx, lc, ns))
			dumpSidecarEnv(t, ns)
		}
		if err := lc.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
			t.Logf("delete namespace %s: %v", ns, err)
		}
	})
}

// dumpRouteControls logs the namespace's AppRoutes and RoutePolicies.
func dumpRouteControls(t *testing.T, ns string) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(lc.RestConfig)
	if err != nil {
		t.Log(err)
		return
	}
	gv := routingv1alpha1.GroupVersion(ebb.Names.Group())
	for _, res := range []string{routingv1alpha1.Resource, routingv1alpha1.RoutePolicyResource} {
		l, err := dyn.Resource(gv.WithResource(res)).Namespace(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Logf("%s of %s: %v", res, ns, err)
			continue
		}
		for _, o := range l.Items {
			y, _ := yaml.Marshal(map[string]any{"generation": o.GetGeneration(), "spec": o.Object["spec"], "status": o.Object["status"]})
			t.Logf("%s %s/%s:\n%s", res, ns, o.GetName(), y)
		}
	}
}

// dumpSidecarEnv logs the ebb settings (EBB_* variables) the webhook gave
// each pod's sidecar.
func dumpSidecarEnv(t *testing.T, ns string) {
	t.Helper()
	pods, err := lc.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Logf("pods of %s: %v", ns, err)
		return
	}
	for _, p := range pods.Items {
		for _, c := range p.Spec.InitContainers {
			var env []string
			for _, e := range c.Env {
				if strings.HasPrefix(e.Name, "EBB_") {
					v := e.Value
					if len(v) > 300 {
						v = v[:300] + "…"
					}
					env = append(env, e.Name+"="+v)
				}
			}
			t.Logf("pod %s, container %s: %s", p.Name, c.Name, strings.Join(env, " "))
		}
	}
}

// answer is one request's outcome, with the response's headers.
type answer struct {
	Status int
	Header http.Header
	Body   string
	Err    error
	Sent   time.Time
	Took   time.Duration
}

func (a answer) String() string {
	if a.Err != nil {
		return fmt.Sprintf("error after %s: %v", a.Took.Round(time.Millisecond), a.Err)
	}
	return fmt.Sprintf("%d after %s: %q", a.Status, a.Took.Round(time.Millisecond), a.Body)
}

// fetch sends one GET for host to url with the given headers.
func fetch(ctx context.Context, client *http.Client, url, host string, header http.Header) answer {
	a := answer{Sent: time.Now()}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		a.Err = err
		return a
	}
	req.Host = host
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := client.Do(req)
	if err != nil {
		a.Err, a.Took = err, time.Since(a.Sent)
		return a
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	a.Status, a.Header, a.Body, a.Err, a.Took = resp.StatusCode, resp.Header, string(b), err, time.Since(a.Sent)
	return a
}

// newClient is a client that opens a connection per request, as a load
// balancer's health checker or a test's separate clients do.
func newClient(timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true}}
}

// prober sends a GET every interval, each on its own connection and in its
// own goroutine so that a slow answer does not delay the next, until stop.
// It keeps to its schedule: a probe that a busy machine sends late is sent
// all the same (a time.Ticker would drop it).
type prober struct {
	mu      sync.Mutex
	answers []answer
	stop    chan struct{}
	done    sync.WaitGroup
}

func startProber(ctx context.Context, url, host string, interval time.Duration) *prober {
	return startProberWith(ctx, newClient(10*time.Second), url, host, interval)
}

// startProberWith is startProber with the client given (its timeout is how
// long a probe waits for its answer).
func startProberWith(ctx context.Context, client *http.Client, url, host string, interval time.Duration) *prober {
	p := &prober{stop: make(chan struct{})}
	p.done.Add(1)
	go func() {
		defer p.done.Done()
		start := time.Now()
		for i := 1; ; i++ {
			p.done.Add(1)
			go func() {
				defer p.done.Done()
				a := fetch(ctx, client, url, host, nil)
				p.mu.Lock()
				p.answers = append(p.answers, a)
				p.mu.Unlock()
			}()
			select {
			case <-p.stop:
				return
			case <-ctx.Done():
				return
			case <-time.After(time.Until(start.Add(time.Duration(i) * interval))):
			}
		}
	}()
	return p
}

// Stop stops sending, waits for the answers in flight and returns every
// answer.
func (p *prober) Stop() []answer {
	close(p.stop)
	p.done.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.answers
}

// idleSampler reads the AppRoute's Idle condition every second until
// stopped, and keeps every sample that was not Idle True.
type idleSampler struct {
	samples atomic.Int64
	mu      sync.Mutex
	notIdle []string
	stop    func()
}

func sampleIdle(ctx context.Context, ns, app string) *idleSampler {
	s := &idleSampler{}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	s.stop = func() { cancel(); <-done }
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			route, err := ebb.AppRoute(ctx, lc, ns, app)
			if ctx.Err() != nil {
				return
			}
			s.samples.Add(1)
			var what string
			switch c := install.RouteCondition(route, routingv1alpha1.ConditionIdle); {
			case err != nil:
				what = err.Error()
			case c == nil:
				what = "no Idle condition"
			case c.Status != metav1.ConditionTrue:
				what = fmt.Sprintf("Idle %s %s: %s", c.Status, c.Reason, c.Message)
			}
			if what != "" {
				s.mu.Lock()
				s.notIdle = append(s.notIdle, time.Now().Format("15:04:05.000")+" "+what)
				s.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

// waitIdleTrue waits until the AppRoute's Idle condition is True.
func waitIdleTrue(ctx context.Context, ns, app string, timeout time.Duration) error {
	_, err := ebb.WaitRoute(ctx, lc, ns, app, "Idle True", timeout, func(r *routingv1alpha1.AppRoute) bool {
		c := install.RouteCondition(r, routingv1alpha1.ConditionIdle)
		return c != nil && c.Status == metav1.ConditionTrue
	})
	return err
}

// deployRouteControlApp deploys app name at zero in ns (opted in) with the
// pod template's annotations (route-control keys without the suffix) and
// environment, scaled by s.
func deployRouteControlApp(t *testing.T, ns, name string, s install.Scaling, annotations, env map[string]string) *install.AppAtZero {
	t.Helper()
	a, err := ebb.DeployAtZeroWith(t.Context(), lc, ns, name, s, func(d *appsv1.Deployment) {
		ebb.Annotate(d, annotations)
		c := &d.Spec.Template.Spec.Containers[0]
		for k, v := range env {
			c.Env = append(c.Env, corev1.EnvVar{Name: k, Value: v})
		}
	}, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	if a.StartedAtOne {
		t.Logf("NOTE: the webhook made no AppRoute for a Deployment created at 0 replicas; it was created at 1 and KEDA scaled it to 0")
	}
	return a
}

// servedByApp tells whether the test app's hello page answered, from one
// of the app's pods.
func servedByApp(t *testing.T, a *install.AppAtZero, body string) bool {
	t.Helper()
	pods, err := ebb.PodsOf(t.Context(), lc, a.Namespace, a.Name)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		if body == "hello from "+p.Name+"\n" {
			return true
		}
	}
	return false
}

// TestRouteControlStaticAnswerKeepsAppAtZero: an uptime checker probing
// /healthz every 200 ms for 60 s never wakes an app whose RoutePolicy
// answers /healthz at zero (AtZero): the Deployment stays at 0 replicas,
// the AppRoute Idle True, and every probe gets the rule's status, header
// and body from the activator. A request to / then wakes the app and is
// answered by it; with the app warm the probes go on (answered by the app,
// not counted) and the app still goes back to zero once the real traffic
// stops, the probes answered all along.
func TestRouteControlStaticAnswerKeepsAppAtZero(t *testing.T) {
	ctx := t.Context()
	const ns, app = "e2e-rc-static", "probed"
	routeControlNamespace(t, ns, app)
	// The policy first, as `kubectl apply -f dir/` may create it: it
	// names an app that does not exist yet.
	if err := lc.EnsureNamespace(ctx, ns, ebb.OptIn()); err != nil {
		t.Fatal(err)
	}
	rule := routingv1alpha1.StaticResponse{
		Name:  "healthz",
		Match: routingv1alpha1.StaticMatch{Path: &routingv1alpha1.PathMatch{Type: routingv1alpha1.PathMatchExact, Value: "/healthz"}, Method: http.MethodGet},
		When:  routingv1alpha1.AnswerAtZero,
		Response: routingv1alpha1.StaticAnswer{Status: http.StatusOK, Body: "ok (static, app at zero)\n",
			Headers: []routingv1alpha1.HTTPHeader{{Name: "X-Static-Rule", Value: "healthz"}}},
	}
	if err := ebb.CreateRoutePolicy(ctx, lc, &routingv1alpha1.RoutePolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: app},
		Spec:       routingv1alpha1.RoutePolicySpec{App: app, StaticResponses: []routingv1alpha1.StaticResponse{rule}},
	}); err != nil {
		t.Fatal(err)
	}
	a := deployRouteControlApp(t, ns, app, scaling, nil, nil)
	if _, err := ebb.WaitPolicyApplied(ctx, lc, ns, app, app, 60*time.Second, func(r *routingv1alpha1.AppRoute) bool {
		return len(r.Spec.StaticResponses) == 1 && r.Spec.StaticResponses[0].Name == rule.Name
	}); err != nil {
		t.Fatal(err)
	}
	if err := waitIdleTrue(ctx, ns, app, 60*time.Second); err != nil {
		t.Fatal(err)
	}

	var tl timeline
	tl.mark(time.Now(), "at zero, Idle True: probes every 200 ms to /healthz start")
	var most atomic.Int32
	stopReplicas := watchReplicas(ctx, a, &tl, &most)
	defer stopReplicas()
	idle := sampleIdle(ctx, ns, app)
	probes := startProber(ctx, a.URL+"healthz", a.Host, 200*time.Millisecond)
	time.Sleep(60 * time.Second)
	idle.stop()
	stopAtZero := time.Now()
	tl.mark(stopAtZero, "60 s of probes at zero")

	if n := most.Load(); n > 0 {
		t.Errorf("the Deployment went to %d replicas while only /healthz was probed at zero", n)
	}
	if len(idle.notIdle) > 0 {
		t.Errorf("the AppRoute was not Idle True in %d of %d samples while only /healthz was probed at zero:\n%s", len(idle.notIdle), idle.samples.Load(), strings.Join(idle.notIdle, "\n"))
	}
	if pods, err := ebb.PodsOf(ctx, lc, ns, app); err != nil || len(pods) > 0 {
		t.Errorf("the app has %d pods (%v) after 60 s of probes at zero, want none", len(pods), err)
	}

	// A real request wakes the app.
	client := newClient(60 * time.Second)
	real := fetch(ctx, client, a.URL, a.Host, nil)
	tl.mark(time.Now(), "a request to / answered: "+real.String())
	if real.Err != nil || real.Status != http.StatusOK || !servedByApp(t, a, real.Body) {
		stopReplicas()
		t.Fatalf("GET / after the probes: %s; want 200 from the app's pod\ntimeline:\n%s", real, tl.String())
	}
	// Warm, the probes go on; the app goes back to zero all the same.
	warm := time.Now()
	if err := lc.WaitReplicas(ctx, ns, app, 0, 90*time.Second); err != nil {
		t.Errorf("with the app warm and /healthz probed every 200 ms: %v\ntimeline:\n%s", err, tl.String())
	}
	toZero := time.Since(warm)
	tl.mark(time.Now(), "replicas 0 with the probes going on")
	// The probes around the last pod's going, answered too.
	time.Sleep(5 * time.Second)
	answers := probes.Stop()
	stopReplicas()

	var atZero, static, byApp, bad int
	var badOnes []string
	for _, p := range answers {
		if p.Sent.Before(stopAtZero) {
			atZero++
		}
		isStatic := p.Err == nil && p.Status == int(rule.Response.Status) && p.Body == rule.Response.Body && p.Header.Get("X-Static-Rule") == "healthz"
		isApp := p.Err == nil && p.Status == http.StatusOK && p.Body == "ok\n" && p.Header.Get("X-Static-Rule") == ""
		switch {
		case isStatic:
			static++
		case isApp && !p.Sent.Before(stopAtZero):
			byApp++
		default:
			bad++
			if len(badOnes) < 10 {
				badOnes = append(badOnes, fmt.Sprintf("sent %s: %s (X-Static-Rule %q)", p.Sent.Format("15:04:05.000"), p, p.Header.Get("X-Static-Rule")))
			}
		}
	}
	t.Logf("timeline:\n%s", tl.String())
	t.Logf("%d probes: %d during the 60 s at zero, %d answered by the static rule, %d by the warm app, %d neither", len(answers), atZero, static, byApp, bad)
	fmt.Printf("FIGURE: static answer at zero: %d probes to /healthz in 60 s at zero (every 200 ms), %d answered by the rule, Deployment replicas max %d; app woken by / in %s; with probes going on, back to zero %s after the app answered (rateWindow %s, cooldown %ds)\n",
		atZero, static, most.Load(), real.Took.Round(time.Millisecond), toZero.Round(time.Millisecond), scaling.RateWindow, scaling.Cooldown)
	if atZero < 295 {
		t.Errorf("only %d probes sent in 60 s at zero, want 300", atZero)
	}
	if static < atZero {
		t.Errorf("%d probes answered by the rule, fewer than the %d sent at zero", static, atZero)
	}
	if bad > 0 {
		t.Errorf("%d probes answered neither by the rule (%d %q) nor, once warm, by the app's /healthz:\n%s", bad, rule.Response.Status, rule.Response.Body, strings.Join(badOnes, "\n"))
	}
}

// TestRouteControlStreamIdleTimeout: a WebSocket to an app that stops
// answering on it (accepts the upgrade, then silent) is closed by ebb once
// nothing has passed either way for the route's stream-idle-timeout (5 s),
// while a WebSocket that talks every 2 s stays open past it; once both are
// gone the app's own end is closed too, and the app scales to zero.
func TestRouteControlStreamIdleTimeout(t *testing.T) {
	ctx := t.Context()
	const ns, app = "e2e-rc-idle", "tunnel"
	const idleTimeout = 5 * time.Second
	routeControlNamespace(t, ns, app)
	a := deployRouteControlApp(t, ns, app, scaling, map[string]string{"stream-idle-timeout": idleTimeout.String()}, nil)
	wsURL := "ws" + strings.TrimPrefix(a.URL, "http") + "ws"
	dial := func(query string) *websocket.Conn {
		t.Helper()
		d := websocket.Dialer{HandshakeTimeout: 60 * time.Second}
		c, resp, err := d.DialContext(ctx, wsURL+query, http.Header{"Host": {a.Host}})
		if err != nil {
			t.Fatalf("dial %s%s: %v (response %v)", wsURL, query, err, resp)
		}
		return c
	}
	begin := time.Now()
	silent := dial("?silent=1") // wakes the app
	opened := time.Now()
	defer silent.Close()
	t.Logf("silent WebSocket open %s after the dial (cold start)", opened.Sub(begin).Round(time.Millisecond))
	chatty := dial("")
	defer chatty.Close()

	talked := make(chan error, 1)
	go func() {
		// 5 echoes 2 s apart: open 8 s, never 5 s silent.
		for i := range 5 {
			if i > 0 {
				time.Sleep(2 * time.Second)
			}
			chatty.SetReadDeadline(time.Now().Add(10 * time.Second))
			msg := fmt.Sprintf("still here %d", i)
			if err := chatty.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
				talked <- fmt.Errorf("write %q: %w", msg, err)
				return
			}
			if _, b, err := chatty.ReadMessage(); err != nil || string(b) != msg {
				talked <- fmt.Errorf("echo of %q after %s open: %q, %v", msg, time.Since(opened).Round(time.Millisecond), b, err)
				return
			}
		}
		talked <- nil
	}()

	silent.SetReadDeadline(opened.Add(30 * time.Second))
	_, msg, err := silent.ReadMessage()
	closedAfter := time.Since(opened)
	var ne net.Error
	switch {
	case err == nil:
		t.Errorf("the silent WebSocket got a message %q after %s", msg, closedAfter.Round(time.Millisecond))
	case errors.As(err, &ne) && ne.Timeout():
		t.Errorf("the silent WebSocket was still open %s after its last byte (stream-idle-timeout %s)", closedAfter.Round(time.Millisecond), idleTimeout)
	case closedAfter < idleTimeout-500*time.Millisecond || closedAfter > idleTimeout+4*time.Second:
		t.Errorf("the silent WebSocket was closed %s after its last byte (%v), want about the stream-idle-timeout %s", closedAfter.Round(time.Millisecond), err, idleTimeout)
	default:
		t.Logf("the silent WebSocket was closed %s after its last byte: %v", closedAfter.Round(time.Millisecond), err)
	}
	if err := <-talked; err != nil {
		t.Errorf("the WebSocket that talks every 2 s: %v", err)
	}
	chatty.Close()
	silent.Close()
	closed := time.Now()

	// The app's ends of both are closed: nothing in flight in the app.
	pods, err := ebb.PodsOf(ctx, lc, ns, app)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		if p.Status.PodIP == "" {
			continue
		}
		var last string
		if err := cluster.WaitFor(ctx, 5*time.Second, "the app in "+p.Name+" with nothing in flight", func(ctx context.Context) (bool, error) {
			r := fetch(ctx, newClient(2*time.Second), fmt.Sprintf("http://%s:%d/inflight", p.Status.PodIP, install.AppPort), "", nil)
			last = r.String()
			return r.Err == nil && r.Header.Get("X-App-In-Flight") == "0", nil
		}); err != nil {
			t.Errorf("%v: ebb left the app's end of a WebSocket open (last: %s)", err, last)
		}
	}
	if err := lc.WaitReplicas(ctx, ns, app, 0, 90*time.Second); err != nil {
		t.Fatalf("after the WebSockets closed: %v", err)
	}
	toZero := time.Since(closed)
	if err := waitIdleTrue(ctx, ns, app, 30*time.Second); err != nil {
		t.Error(err)
	}
	fmt.Printf("FIGURE: stream idle timeout %s: a silent WebSocket closed %s after its last byte; a WebSocket talking every 2 s open 8 s; replicas 0 %s after both closed (rateWindow %s, cooldown %ds)\n",
		idleTimeout, closedAfter.Round(time.Millisecond), toZero.Round(time.Millisecond), scaling.RateWindow, scaling.Cooldown)
}

// TestRouteControlRequestTimeout: on a route with request-timeout 2s, a
// request the app takes 5 s to answer gets 504 from ebb 2 s after it was
// sent, and one the app answers in 500 ms gets its 200, while the same 5 s
// request to another app of the namespace, with no timeout set, gets its
// 200. Both apps are warm and busy (a request every 500 ms), so the
// requests go straight to their pods' sidecars.
func TestRouteControlRequestTimeout(t *testing.T) {
	ctx := t.Context()
	const ns = "e2e-rc-timeout"
	const timeout = 2 * time.Second
	routeControlNamespace(t, ns, "bounded", "unbounded")
	var bounded, unbounded *install.AppAtZero
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, app := range []string{"bounded", "unbounded"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var ann map[string]string
			if app == "bounded" {
				ann = map[string]string{"request-timeout": timeout.String()}
			}
			a, err := ebb.DeployAtZeroWith(ctx, lc, ns, app, scaling, func(d *appsv1.Deployment) { ebb.Annotate(d, ann) }, t.Logf)
			errs[i] = err
			if app == "bounded" {
				bounded = a
			} else {
				unbounded = a
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	// Wake both and keep them busy: not idle, no hand-off slice.
	var busy []*prober
	for _, a := range []*install.AppAtZero{bounded, unbounded} {
		busy = append(busy, startProber(ctx, a.URL, a.Host, 500*time.Millisecond))
	}
	for _, a := range []*install.AppAtZero{bounded, unbounded} {
		if err := cluster.WaitFor(ctx, 60*time.Second, a.Name+" served by its pod, no hand-off slice", func(ctx context.Context) (bool, error) {
			n, err := ebb.HandOffEndpoints(ctx, lc, a.Namespace, a.Name)
			if err != nil || n > 0 {
				return false, err
			}
			route, err := ebb.AppRoute(ctx, lc, a.Namespace, a.Name)
			return err == nil && route.Status.ReadyEndpoints > 0, err
		}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(2 * time.Second) // kube-proxy's sync after the slice went

	client := newClient(60 * time.Second)
	var long, short, other answer
	wg.Add(3)
	go func() { defer wg.Done(); long = fetch(ctx, client, bounded.URL+"?delay=5s", bounded.Host, nil) }()
	go func() { defer wg.Done(); short = fetch(ctx, client, bounded.URL+"?delay=500ms", bounded.Host, nil) }()
	go func() { defer wg.Done(); other = fetch(ctx, client, unbounded.URL+"?delay=5s", unbounded.Host, nil) }()
	wg.Wait()
	t.Logf("request-timeout %s: bounded /?delay=5s: %s; bounded /?delay=500ms: %s; unbounded /?delay=5s: %s", timeout, long, short, other)
	if long.Err != nil || long.Status != http.StatusGatewayTimeout {
		t.Errorf("a 5 s request on the route with request-timeout %s: %s, want 504", timeout, long)
	} else if long.Took < timeout-100*time.Millisecond || long.Took > timeout+2*time.Second {
		t.Errorf("the 504 came %s after the request, want about the request-timeout %s", long.Took.Round(time.Millisecond), timeout)
	}
	if short.Err != nil || short.Status != http.StatusOK || !servedByApp(t, bounded, short.Body) {
		t.Errorf("a 500 ms request on the route with request-timeout %s: %s, want the app's 200", timeout, short)
	}
	if other.Err != nil || other.Status != http.StatusOK || !servedByApp(t, unbounded, other.Body) || other.Took < 5*time.Second {
		t.Errorf("a 5 s request on the route with no timeout: %s, want the app's 200 after 5 s", other)
	}
	for i, p := range busy {
		for _, r := range p.Stop() {
			if r.Err != nil || r.Status != http.StatusOK {
				t.Errorf("a request keeping %s busy: %s", []string{"bounded", "unbounded"}[i], r)
				break
			}
		}
	}
	fmt.Printf("FIGURE: request timeout %s: 504 after %s; another route's 5 s request 200 after %s\n", timeout, long.Took.Round(time.Millisecond), other.Took.Round(time.Millisecond))
}

// TestRouteControlPlaceholder: a browser (GET, Accept: text/html) to an app
// at zero gets the route's own placeholder page at once — the RoutePolicy's
// status, its Refresh header, the body from its ConfigMap — while an API
// client's request is held and answered by the app; the app wakes and the
// browser's reload then gets the app's page.
func TestRouteControlPlaceholder(t *testing.T) {
	ctx := t.Context()
	const ns, app = "e2e-rc-placeholder", "page"
	routeControlNamespace(t, ns, app)
	a := deployRouteControlApp(t, ns, app, scaling, nil, nil)
	// The policy after the app, the other order than the static answer's
	// test.
	const page = "<!doctype html>\n<title>Waking up</title>\n<p>page is starting; this page reloads itself.</p>\n"
	if _, err := lc.Client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: app + "-waiting"},
		Data:       map[string]string{"page.html": page},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := ebb.CreateRoutePolicy(ctx, lc, &routingv1alpha1.RoutePolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: app},
		Spec: routingv1alpha1.RoutePolicySpec{App: app, Placeholder: &routingv1alpha1.PlaceholderSource{
			Status:          http.StatusServiceUnavailable,
			Headers:         []routingv1alpha1.HTTPHeader{{Name: "Refresh", Value: "2"}, {Name: "Cache-Control", Value: "no-store"}},
			ConfigMapKeyRef: routingv1alpha1.ConfigMapKeyRef{Name: app + "-waiting", Key: "page.html"},
		}},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := ebb.WaitPolicyApplied(ctx, lc, ns, app, app, 60*time.Second, func(r *routingv1alpha1.AppRoute) bool {
		return r.Spec.Placeholder != nil && r.Spec.Placeholder.Body == page
	}); err != nil {
		t.Fatal(err)
	}
	if err := ebb.WaitAtZero(ctx, lc, a, 30*time.Second); err != nil {
		t.Fatal(err)
	}

	browser := http.Header{"Accept": {"text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}}
	client := newClient(60 * time.Second)
	first := fetch(ctx, client, a.URL, a.Host, browser)
	t.Logf("browser at zero: %s, headers %v", first, first.Header)
	switch {
	case first.Err != nil || first.Status != http.StatusServiceUnavailable || first.Body != page:
		t.Errorf("a browser's GET at zero: %s; want 503 with the ConfigMap's page %q", first, page)
	case first.Header.Get("Refresh") != "2" || first.Header.Get("Cache-Control") != "no-store":
		t.Errorf("the placeholder's headers: Refresh %q, Cache-Control %q; want 2, no-store (all: %v)", first.Header.Get("Refresh"), first.Header.Get("Cache-Control"), first.Header)
	case !strings.HasPrefix(first.Header.Get("Content-Type"), "text/html"):
		t.Errorf("the placeholder's Content-Type %q, want text/html", first.Header.Get("Content-Type"))
	}
	if first.Took > 2*time.Second {
		t.Errorf("the placeholder came after %s: the browser waited for the cold start", first.Took.Round(time.Millisecond))
	}
	// The browser's request alone wakes the app.
	if err := waitReplicasAtLeast(ctx, a, 1, 30*time.Second); err != nil {
		t.Fatalf("after the placeholder: %v", err)
	}
	// An API client is not given the page: held, then answered by the app.
	api := make(chan answer, 1)
	go func() { api <- fetch(ctx, client, a.URL, a.Host, http.Header{"Accept": {"application/json"}}) }()
	// The browser reloads every 2 s, as Refresh says, until the app
	// answers.
	var reloads int
	var last answer
	for {
		time.Sleep(2 * time.Second)
		reloads++
		last = fetch(ctx, client, a.URL, a.Host, browser)
		if last.Err == nil && last.Status == http.StatusOK {
			break
		}
		if reloads == 30 {
			t.Fatalf("the browser's reloads got no page from the app in 60 s (last: %s)", last)
		}
	}
	woke := time.Since(first.Sent)
	if !servedByApp(t, a, last.Body) {
		t.Errorf("the reload's 200 is not the app's page: %q", last.Body)
	}
	r := <-api
	if r.Err != nil || r.Status != http.StatusOK || !servedByApp(t, a, r.Body) {
		t.Errorf("an API client's GET (Accept: application/json) at zero: %s, want held and answered 200 by the app", r)
	}
	fmt.Printf("FIGURE: placeholder: the browser's page (503, Refresh 2) in %s; the app's page after %d reloads, %s after the first request; an API client's request sent once the app was woken held and answered in %s\n",
		first.Took.Round(time.Millisecond), reloads, woke.Round(time.Millisecond), r.Took.Round(time.Millisecond))
}

// TestRouteControlFallback: an app that cannot start (its readiness check
// fails for an hour) with cold-start-timeout 5s and a fallback Service
// (a plain Deployment of the test app that ebb leaves alone): the
// AppRoute says FallbackReady True, and requests held at zero are sent to
// the fallback once the 5 s have passed, each answered 200 by a fallback
// pod.
func TestRouteControlFallback(t *testing.T) {
	ctx := t.Context()
	const ns, app, fallback = "e2e-rc-fallback", "stuck", "standby"
	const coldStart = 5 * time.Second
	routeControlNamespace(t, ns, app)
	if err := lc.EnsureNamespace(ctx, ns, ebb.OptIn()); err != nil {
		t.Fatal(err)
	}
	fd, fsvc := install.PlainApp(ns, fallback, 1, nil)
	if _, err := lc.Client.AppsV1().Deployments(ns).Create(ctx, fd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := lc.Client.CoreV1().Services(ns).Create(ctx, fsvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := install.WaitDeploymentReady(ctx, lc, ns, fallback, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	a := deployRouteControlApp(t, ns, app, scaling,
		map[string]string{"cold-start-timeout": coldStart.String(), "fallback": fallback + ":80"},
		map[string]string{"READY_AFTER": "1h"})
	route, err := ebb.WaitRoute(ctx, lc, ns, app, "FallbackReady True naming "+fallback, 60*time.Second, func(r *routingv1alpha1.AppRoute) bool {
		c := install.RouteCondition(r, routingv1alpha1.ConditionFallbackReady)
		return r.Spec.Fallback != nil && c != nil && c.Status == metav1.ConditionTrue && strings.Contains(c.Message, fallback) && install.Propagated(r)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("FallbackReady: %+v", *install.RouteCondition(route, routingv1alpha1.ConditionFallbackReady))

	const n = 5
	answers := make([]answer, n)
	var wg sync.WaitGroup
	client := newClient(60 * time.Second)
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); answers[i] = fetch(ctx, client, a.URL, a.Host, nil) }()
	}
	wg.Wait()
	fallbackPods, err := lc.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + fallback})
	if err != nil {
		t.Fatal(err)
	}
	byFallback := func(body string) bool {
		for _, p := range fallbackPods.Items {
			if body == "hello from "+p.Name+"\n" {
				return true
			}
		}
		return false
	}
	var slowest time.Duration
	for i, r := range answers {
		slowest = max(slowest, r.Took)
		switch {
		case r.Err != nil || r.Status != http.StatusOK || !byFallback(r.Body):
			t.Errorf("request %d held while %s cannot start: %s, want the fallback's 200", i, app, r)
		case r.Took < coldStart-100*time.Millisecond || r.Took > coldStart+5*time.Second:
			t.Errorf("request %d answered by the fallback after %s, want just after the cold-start timeout %s", i, r.Took.Round(time.Millisecond), coldStart)
		}
	}
	// The app was woken and did not start: the fallback answered because
	// of it, not because the app never got a pod.
	pods, err := ebb.PodsOf(ctx, lc, ns, app)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				t.Errorf("pod %s of %s is Ready: the test app's READY_AFTER=1h did not keep it from starting", p.Name, app)
			}
		}
	}
	if len(pods) == 0 {
		t.Errorf("%s has no pod: the held requests did not wake it", app)
	}
	fmt.Printf("FIGURE: fallback: %d requests held while the app could not start, all answered 200 by the fallback Service, the slowest after %s (cold-start-timeout %s)\n", n, slowest.Round(time.Millisecond), coldStart)
}

// deployLimitedApp deploys app at zero in a new namespace ns with the
// given concurrency annotations, up to 3 replicas that KEDA adds at once
// (targetConcurrency 1), its responses saying what it had in flight.
func deployLimitedApp(t *testing.T, ns, app string, annotations map[string]string) *install.AppAtZero {
	t.Helper()
	routeControlNamespace(t, ns, app)
	fast := map[string]any{"stabilizationWindowSeconds": int64(0), "policies": []any{map[string]any{"type": "Percent", "value": int64(200), "periodSeconds": int64(1)}}}
	s := install.Scaling{Max: 3, PollingInterval: 1, Cooldown: 5, TargetConcurrency: 1, RateWindow: "3s", HPABehavior: map[string]any{"scaleUp": fast}}
	return deployRouteControlApp(t, ns, app, s, annotations, map[string]string{"IN_FLIGHT_HEADERS": "true"})
}

// TestRouteControlConcurrencyLimit: an app with concurrency 1, 20
// concurrent requests of 1 s at zero: the app never has more than one
// request at once (each response says the most it has had at once, and
// every pod's own count says so at the end), the sidecar's /stats?detail
// shows the limit, its queue (default bound 100) and the queued requests
// counted in flight, KEDA scales out on them (targetConcurrency 1, max 3),
// and all 20 are answered 200 by the app.
func TestRouteControlConcurrencyLimit(t *testing.T) {
	ctx := t.Context()
	const ns, app = "e2e-rc-limit", "single"
	a := deployLimitedApp(t, ns, app, map[string]string{"concurrency": "1"})

	var tl timeline
	var most atomic.Int32
	stopReplicas := watchReplicas(ctx, a, &tl, &most)
	defer stopReplicas()
	const n = 20
	// 1 s each: 20 s of work for one pod at a time, time enough for the HPA
	// (2 s sync) to act on the queue while it lasts.
	answers := make([]answer, n)
	var wg sync.WaitGroup
	client := newClient(120 * time.Second)
	// What the sidecars say meanwhile: their limit, their queue, and the
	// queued requests counted in flight.
	type detail struct{ limit, queueLimit, queued, inFlight int64 }
	var (
		mu       sync.Mutex
		deepest  detail // the sample with the most queued
		detailed int
	)
	sampleCtx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		c := newClient(time.Second)
		for sampleCtx.Err() == nil {
			pods, _ := ebb.PodsOf(sampleCtx, lc, ns, app)
			for _, p := range pods {
				if p.Status.PodIP == "" {
					continue
				}
				r := fetch(sampleCtx, c, fmt.Sprintf("http://%s:%d%s?detail", p.Status.PodIP, sidecarapi.DefaultAdminPort, sidecarapi.StatsPath), "", nil)
				if r.Err != nil || r.Status != http.StatusOK {
					continue
				}
				d := detail{limit: -1}
				for _, line := range strings.Split(r.Body, "\n") {
					k, v, _ := strings.Cut(line, " ")
					n, _ := strconv.ParseInt(v, 10, 64)
					switch k {
					case "concurrency_limit":
						d.limit = n
					case "queue_limit":
						d.queueLimit = n
					case "queued":
						d.queued = n
					case "in_flight":
						d.inFlight = n
					}
				}
				mu.Lock()
				detailed++
				if detailed == 1 || d.queued > deepest.queued {
					deepest = d
				}
				mu.Unlock()
			}
			select {
			case <-sampleCtx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	tl.mark(time.Now(), fmt.Sprintf("%d concurrent requests of 1 s at zero", n))
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); answers[i] = fetch(ctx, client, a.URL+"?delay=1s", a.Host, nil) }()
	}
	wg.Wait()
	tl.mark(time.Now(), "all answered")
	stopSampling()
	<-sampled
	pods, err := ebb.PodsOf(ctx, lc, ns, app)
	if err != nil {
		t.Fatal(err)
	}
	stopReplicas()
	t.Logf("timeline:\n%s", tl.String())

	var ok int
	seen := map[string]int{} // X-App-Max-In-Flight → count
	var slowest time.Duration
	for i, r := range answers {
		slowest = max(slowest, r.Took)
		if r.Err != nil || r.Status != http.StatusOK || !servedByApp(t, a, r.Body) {
			t.Errorf("request %d: %s, want the app's 200", i, r)
			continue
		}
		ok++
		seen[r.Header.Get("X-App-Max-In-Flight")]++
		if r.Header.Get("X-App-In-Flight") != "1" || r.Header.Get("X-App-Max-In-Flight") != "1" {
			t.Errorf("request %d: the app had %s in flight on its arrival, at most %s at once; want 1 and 1", i, r.Header.Get("X-App-In-Flight"), r.Header.Get("X-App-Max-In-Flight"))
		}
	}
	// Each pod's own count, read from the pod's address past the sidecar.
	var total, maxSeen int
	var perPod []string
	for _, p := range pods {
		if p.Status.PodIP == "" {
			continue
		}
		r := fetch(ctx, newClient(2*time.Second), fmt.Sprintf("http://%s:%d/inflight", p.Status.PodIP, install.AppPort), "", nil)
		if r.Err != nil || r.Status != http.StatusOK {
			t.Errorf("%s /inflight: %s", p.Name, r)
			continue
		}
		served, err1 := strconv.Atoi(r.Header.Get("X-App-Requests"))
		most, err2 := strconv.Atoi(r.Header.Get("X-App-Max-In-Flight"))
		if err := errors.Join(err1, err2); err != nil {
			t.Errorf("%s /inflight: %v (headers %v)", p.Name, err, r.Header)
			continue
		}
		total += served
		maxSeen = max(maxSeen, most)
		perPod = append(perPod, fmt.Sprintf("%s: %d served, at most %d at once", p.Name, served, most))
		if most > 1 {
			t.Errorf("pod %s had %d requests at once, want at most 1", p.Name, most)
		}
	}
	t.Logf("per pod: %s", strings.Join(perPod, "; "))
	if total != n {
		t.Errorf("the app's pods served %d requests in all, want %d (each request once)", total, n)
	}
	if m := most.Load(); m < 2 {
		t.Errorf("KEDA scaled the app to %d replicas at most, want more than 1 (20 requests queued behind a limit of 1, targetConcurrency 1)", m)
	}
	if maxSeen != 1 {
		t.Errorf("the pods' most requests at once: %d, want 1", maxSeen)
	}
	t.Logf("the sidecars' /stats?detail, %d samples; the most queued: %+v", detailed, deepest)
	switch {
	case deepest.limit != 1 || deepest.queueLimit != 100:
		t.Errorf("the sidecar's /stats?detail says concurrency_limit %d, queue_limit %d; want 1 and 100 (the default)", deepest.limit, deepest.queueLimit)
	case deepest.queued < 1:
		t.Errorf("no sidecar had a request queued in %d samples while %d requests waited on a limit of 1", detailed, n)
	case deepest.inFlight < deepest.queued+1:
		t.Errorf("the sidecar had %d queued but %d in flight: queued requests must count in flight (for the scaler)", deepest.queued, deepest.inFlight)
	}
	fmt.Printf("FIGURE: concurrency 1: %d of %d concurrent requests answered 200 (the slowest after %s), the most the app had at once %d (by its responses %v), the sidecar's queue at most %d (in flight %d), replicas up to %d\n",
		ok, n, slowest.Round(time.Millisecond), maxSeen, seen, deepest.queued, deepest.inFlight, most.Load())
}

// TestConcurrencyLimitBurstAtZero: a burst far past what one pod's limit
// and queue take (30 requests; concurrency 1, queue 1) held at zero is
// released to the pods as they can take it, so every request is answered
// by the app and none gets the sidecar's 503 for a full queue. Before the
// activators kept to the limit, the first ready pod got every held request
// at once and its sidecar refused all but two.
func TestConcurrencyLimitBurstAtZero(t *testing.T) {
	ctx := t.Context()
	const ns, app = "e2e-rc-burst", "burst" // its own host: burst.example.com
	a := deployLimitedApp(t, ns, app, map[string]string{"concurrency": "1", "concurrency-queue": "1"})

	var tl timeline
	var most atomic.Int32
	stopReplicas := watchReplicas(ctx, a, &tl, &most)
	defer stopReplicas()
	const n = 30
	answers := make([]answer, n)
	var wg sync.WaitGroup
	client := newClient(60 * time.Second)
	tl.mark(time.Now(), fmt.Sprintf("%d concurrent requests of 200 ms at zero", n))
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); answers[i] = fetch(ctx, client, a.URL+"?delay=200ms", a.Host, nil) }()
	}
	wg.Wait()
	tl.mark(time.Now(), "all answered")
	stopReplicas()
	t.Logf("timeline:\n%s", tl.String())

	var ok, refused int
	var slowest time.Duration
	for i, r := range answers {
		slowest = max(slowest, r.Took)
		switch {
		case r.Err == nil && r.Status == http.StatusOK && servedByApp(t, a, r.Body):
			ok++
			if m := r.Header.Get("X-App-Max-In-Flight"); m != "1" {
				t.Errorf("request %d: the app had at most %s requests at once, want 1", i, m)
			}
		case r.Status == http.StatusServiceUnavailable:
			refused++
			t.Errorf("request %d: %s, want the app's 200 (a pod was given more than its limit and queue)", i, r)
		default:
			t.Errorf("request %d: %s, want the app's 200", i, r)
		}
	}
	fmt.Printf("FIGURE: concurrency 1, queue 1, %d concurrent requests of 200 ms at zero: %d answered 200, %d refused 503 (the slowest after %s), replicas up to %d\n",
		n, ok, refused, slowest.Round(time.Millisecond), most.Load())
}
