package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ebb-dev/ebb/activator/proxy"
	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/tracing/tracingtest"
	"github.com/ebb-dev/ebb/scaler"
	"github.com/ebb-dev/ebb/test/cluster"
)

// within10 reports whether got is within 10 % of want.
func within10(got, want time.Duration) bool {
	d := got - want
	return d <= want/10 && -d <= want/10
}

// TestColdStartTrace: one request with a sampled traceparent wakes an app
// at zero. The test's OTLP receiver gets the activator's hold span (a child
// of the client's span) with a child span per cold-start phase, whose
// durations add up to the cold start the client measured (±10 %); the
// sidecar's span is a child of the activator's; and the AppRoute's
// status.lastColdStart shows the same phases.
func TestColdStartTrace(t *testing.T) {
	ctx := t.Context()
	// Each e2e app has a name of its own: its host is <name>.example.com,
	// and the activator routes by host across namespaces (the older
	// AppRoute of a shared host wins), so an earlier test's "hello" would
	// take this test's requests.
	a := deployAtZero(t, "e2e-trace", "traced")
	t.Cleanup(func() {
		if t.Failed() {
			dumpState(t, a.Namespace)
		}
	})
	tp, traceID, clientSpan := tracingtest.TraceParent()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, a.URL, nil)
	req.Host = a.Host
	req.Header.Set("traceparent", tp)
	start := time.Now()
	resp, err := (&http.Client{Timeout: 90 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	took := time.Since(start)
	if resp.StatusCode != 200 {
		t.Fatalf("the waking request: %s", resp.Status)
	}
	t.Logf("cold start as the client saw it: %v", took)

	var spans []tracingtest.Span
	byName := map[string]tracingtest.Span{}
	err = cluster.WaitFor(ctx, 30*time.Second, "the cold start's spans at the receiver", func(context.Context) (bool, error) {
		spans = otlp.Trace(traceID)
		clear(byName)
		for _, s := range spans {
			byName[s.Name] = s
		}
		_, hold := byName["ebb-activator hold"]
		_, side := byName["ebb-sidecar"]
		return hold && side && len(spans) >= 2+len(proxy.PhaseNames), nil
	})
	for _, s := range spans {
		t.Logf("span %-20s %-14s %8v  parent %s", s.Name, s.Service, s.Duration().Round(time.Microsecond), s.ParentSpanID)
	}
	if err != nil {
		t.Fatal(err)
	}
	hold := byName["ebb-activator hold"]
	if hold.ParentSpanID != clientSpan || hold.Service != "ebb-activator" {
		t.Errorf("hold span %+v, want a child of the client's span %s", hold, clientSpan)
	}
	if sc := byName["ebb-sidecar"]; sc.ParentSpanID != hold.SpanID {
		t.Errorf("the sidecar's span is a child of %s, want the activator's hold span %s", sc.ParentSpanID, hold.SpanID)
	}
	var sum time.Duration
	phases := map[string]time.Duration{}
	for _, name := range proxy.PhaseNames {
		s, ok := byName[name]
		if !ok || s.ParentSpanID != hold.SpanID {
			t.Errorf("phase span %s: %+v, want a child of the hold span", name, s)
		}
		phases[name] = s.Duration()
		sum += s.Duration()
	}
	if !within10(sum, took) {
		t.Errorf("the phase spans add up to %v, the client measured %v: more than 10 %% apart", sum, took)
	}
	for _, name := range []string{"Scaled", "ContainersStarted"} {
		if phases[name] <= 0 {
			t.Errorf("phase %s took %v: the activator did not observe it", name, phases[name])
		}
	}

	var last *routingv1alpha1.ColdStart
	err = cluster.WaitFor(ctx, 10*time.Second, "status.lastColdStart", func(ctx context.Context) (bool, error) {
		r, err := ebb.AppRoute(ctx, lc, a.Namespace, a.Name)
		if err != nil {
			return false, err
		}
		last = r.Status.LastColdStart
		return last != nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("status.lastColdStart: total %v, %+v", last.Total.Duration, last.Phases)
	var names []string
	for _, p := range last.Phases {
		names = append(names, p.Name)
		if d := p.Duration.Duration - phases[p.Name]; d > time.Millisecond || d < -time.Millisecond {
			t.Errorf("status phase %s %v, trace span %v", p.Name, p.Duration.Duration, phases[p.Name])
		}
	}
	if !slices.Equal(names, proxy.PhaseNames[:]) || !within10(last.Total.Duration, took) {
		t.Errorf("status.lastColdStart phases %v total %v, want %v adding up to about %v", names, last.Total.Duration, proxy.PhaseNames, took)
	}
}

// TestIdleWhileWebSocketOpen: an open WebSocket keeps an app awake; the
// AppRoute says so (Idle=False, RequestsInFlight, naming the open
// connection), the app stays up past its window and cooldown, and once
// the WebSocket closes the app goes to zero and Idle turns True.
func TestIdleWhileWebSocketOpen(t *testing.T) {
	ctx := t.Context()
	a := deployAtZero(t, "e2e-why-idle", "awake")
	t.Cleanup(func() {
		if t.Failed() {
			dumpState(t, a.Namespace)
		}
	})
	idle := func(ctx context.Context) (*metav1.Condition, error) {
		r, err := ebb.AppRoute(ctx, lc, a.Namespace, a.Name)
		if err != nil {
			return nil, err
		}
		for i := range r.Status.Conditions {
			if c := &r.Status.Conditions[i]; c.Type == routingv1alpha1.ConditionIdle {
				return c, nil
			}
		}
		return nil, nil
	}
	waitIdle := func(status metav1.ConditionStatus, reason, contains string, timeout time.Duration) *metav1.Condition {
		t.Helper()
		var c *metav1.Condition
		err := cluster.WaitFor(ctx, timeout, fmt.Sprintf("Idle=%s %s", status, reason), func(ctx context.Context) (bool, error) {
			got, err := idle(ctx)
			if got != nil {
				c = got
			}
			return c != nil && c.Status == status && c.Reason == reason && strings.Contains(c.Message, contains), err
		})
		if err != nil {
			t.Fatalf("%v; the condition is %+v", err, c)
		}
		return c
	}
	waitIdle(metav1.ConditionTrue, scaler.ReasonNoRequests, "may scale the app to zero", 30*time.Second)

	dialer := websocket.Dialer{HandshakeTimeout: 90 * time.Second}
	ws, _, err := dialer.DialContext(ctx, "ws"+strings.TrimPrefix(a.URL, "http")+"ws", http.Header{"Host": {a.Host}})
	if err != nil {
		t.Fatalf("WebSocket through the Service: %v", err)
	}
	defer ws.Close()
	if err := ws.WriteMessage(websocket.TextMessage, []byte("hi")); err != nil {
		t.Fatal(err)
	}
	if _, m, err := ws.ReadMessage(); err != nil || string(m) != "hi" {
		t.Fatalf("echo: %q %v", m, err)
	}
	opened := time.Now()
	c := waitIdle(metav1.ConditionFalse, scaler.ReasonRequestsInFlight, "WebSocket", 30*time.Second)
	t.Logf("with the WebSocket open: %s: %s", c.Reason, c.Message)

	// Past the rate window and KEDA's cooldown the app is still up.
	stay := time.Until(opened.Add(2 * (3 + 5) * time.Second))
	deadline := time.Now().Add(stay)
	for time.Now().Before(deadline) {
		d, err := lc.Client.AppsV1().Deployments(a.Namespace).Get(ctx, a.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if d.Spec.Replicas == nil || *d.Spec.Replicas == 0 {
			t.Fatalf("scaled to zero %v after the WebSocket opened, while it was open", time.Since(opened))
		}
		time.Sleep(time.Second)
	}
	if c, _ := idle(ctx); c == nil || c.Reason != scaler.ReasonRequestsInFlight {
		t.Errorf("after %v with the WebSocket open the Idle condition is %+v", time.Since(opened), c)
	}

	ws.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
	ws.Close()
	closed := time.Now()
	if err := ebb.WaitAtZero(ctx, lc, a, 90*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("at zero %v after the WebSocket closed", time.Since(closed).Round(time.Millisecond))
	waitIdle(metav1.ConditionTrue, scaler.ReasonNoRequests, "", 30*time.Second)
}
