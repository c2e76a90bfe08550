package scaler

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/ebb-dev/ebb/internal/holdpush"
	"github.com/ebb-dev/ebb/internal/testwait"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func TestAdminEndpoints(t *testing.T) {
	sc := newSidecar(t, 4, 0, 1)
	r := newRig(t, fake.NewClientset(appPod("hello-0", "hello", sc), appPod("legacy-0", "legacy", nil)), nil)
	c := r.pushClient("ebb-system/activator-0")
	c.Set(holdpush.App{Namespace: ns, Name: "hello"}, 1)
	testwait.For(t, 10*time.Second, "held", func() bool { return r.s.hold.Held(holdpush.App{Namespace: ns, Name: "hello"}) == 1 })
	base := "http://" + r.s.AdminAddr().String()

	code, body := get(t, base+"/apps")
	if code != http.StatusOK {
		t.Fatalf("/apps: %d %s", code, body)
	}
	var got StatusResponse
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	want := StatusResponse{Ready: true,
		Apps: []AppStatus{
			{Namespace: ns, App: "hello", Concurrency: 5, InFlight: 4, Held: 1, Window: "1m0s", Pods: 1, ReadyPods: 1, Active: true,
				Idle: Idleness{Reason: ReasonRequestsHeld, Message: "1 request(s) held by the activator: a cold start is under way."}},
			{Namespace: ns, App: "legacy", Window: "1m0s", BypassedPods: 1, Active: true,
				Idle: Idleness{Reason: ReasonSidecarBypassed, Message: "1 running pod(s) of app legacy have no sidecar: ebb cannot see their requests, so it keeps the app active. Label the namespace for injection and restart the app's pods (kubectl rollout restart, or delete them for a kind it does not know)."}},
		},
		Activators: []holdpush.ActivatorStatus{{Activator: "ebb-system/activator-0", Streams: 1, Apps: 1, Held: 1}},
	}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(AppStatus{}, "RatePerSecond"), cmpopts.IgnoreUnexported(AppStatus{})); diff != "" {
		t.Errorf("/apps (-want +got):\n%s", diff)
	}

	for path, want := range map[string]struct {
		code int
		has  string
	}{
		"/apps/shop/hello":           {200, `"concurrency": 5`},
		"/apps/shop/hello?window=5m": {200, `"window": "5m0s"`},
		"/apps/shop/nobody":          {404, "app shop/nobody has no pod"},
		"/apps?window=1ms":           {400, `window="1ms": set a duration between 1s and 10m0s`},
		"/readyz":                    {200, "ok"},
		"/healthz":                   {200, "ok"},
		"/metrics":                   {200, `ebb_scaler_app_concurrency_requests{app="hello",ebb_instance="ebb.dev",namespace="shop"} 5`},
	} {
		code, body := get(t, base+path)
		if code != want.code || !strings.Contains(body, want.has) {
			t.Errorf("GET %s = %d %q, want %d containing %q", path, code, body, want.code, want.has)
		}
	}
}

func TestAppMetrics(t *testing.T) {
	sc := newSidecar(t, 2, 0, 1)
	r := newRig(t, fake.NewClientset(appPod("hello-0", "hello", sc), appPod("legacy-0", "hello", nil)), nil)
	_, body := get(t, "http://"+r.s.AdminAddr().String()+"/metrics")
	for _, line := range []string{
		`ebb_scaler_app_concurrency_requests{app="hello",ebb_instance="ebb.dev",namespace="shop"} 2`,
		`ebb_scaler_app_inflight_requests{app="hello",ebb_instance="ebb.dev",namespace="shop"} 2`,
		`ebb_scaler_app_held_requests{app="hello",ebb_instance="ebb.dev",namespace="shop"} 0`,
		`ebb_scaler_app_rate_requests_per_second{app="hello",ebb_instance="ebb.dev",namespace="shop"} 0`,
		`ebb_scaler_app_requests_total{app="hello",ebb_instance="ebb.dev",namespace="shop"} 0`,
		`ebb_scaler_app_pods{app="hello",ebb_instance="ebb.dev",namespace="shop",state="read"} 1`,
		`ebb_scaler_app_pods{app="hello",ebb_instance="ebb.dev",namespace="shop",state="bypassed"} 1`,
		`ebb_scaler_app_active{app="hello",ebb_instance="ebb.dev",namespace="shop"} 1`,
		`ebb_scaler_app_cold_starts_total{app="hello",ebb_instance="ebb.dev",namespace="shop"} 0`,
		`ebb_scaler_sidecar_pods{ebb_instance="ebb.dev"} 1`,
		`ebb_scaler_bypassed_pods_seen_total{ebb_instance="ebb.dev"} 1`,
		`ebb_scaler_activators{ebb_instance="ebb.dev"} 0`,
	} {
		if !strings.Contains(body, line+"\n") {
			t.Errorf("/metrics lacks %q", line)
		}
	}
}

// TestBusyForFromTheStatsLine: how long a pod's requests have been in
// flight without a break, the stats line's last figure, reaches the app's
// status, Idle message and metric as the longest of its pods'.
func TestBusyForFromTheStatsLine(t *testing.T) {
	a, b := newSidecar(t, 1, 5, 1), newSidecar(t, 2, 7, 1)
	a.snap.BusyFor, b.snap.BusyFor = 95*time.Second+400*time.Millisecond, 3*time.Second
	r := newRig(t, fake.NewClientset(appPod("hello-0", "hello", a), appPod("hello-1", "hello", b)), nil)
	r.tick()
	st := r.status("hello")
	if st.InFlight != 3 || st.BusyFor != "1m35.4s" || !strings.Contains(st.Idle.Message, "without a break for 1m35s") {
		t.Errorf("status: in flight %d, busy for %q, idle %q; want 3, 1m35.4s and the time named", st.InFlight, st.BusyFor, st.Idle.Message)
	}
	if got := r.metricValue(metricAppBusy); got != 95.4 {
		t.Errorf("%s = %v, want 95.4", metricAppBusy, got)
	}
}
