package scaler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/internal/holdpush"
	"github.com/ebb-dev/ebb/scaler"
	"github.com/ebb-dev/ebb/test/cluster"
	"github.com/ebb-dev/ebb/test/fixtures"
)

// TestKEDAScalesAppOnItsCounts: the real KEDA operator asks ebb-scaler about
// an app. A held request pushed by an activator wakes it 0→1; a request in
// flight in the app's sidecar keeps it at 1 past the cooldown; with no
// traffic it returns to 0.
func TestKEDAScalesAppOnItsCounts(t *testing.T) {
	ctx := t.Context()
	names := groupsuffix.MustNew(groupsuffix.Default)
	const ns, app = "scaler-keda", "hello"
	if err := lc.EnsureNamespace(ctx, ns, nil); err != nil {
		t.Fatal(err)
	}
	installAppRoutes(t, ns, app) // as ebb's webhook makes it

	s := startScaler(t)

	if _, err := lc.Client.AppsV1().Deployments(ns).Create(ctx, fixtures.App(names, ns, app, 0), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc, err := lc.Client.CoreV1().Services(ns).Create(ctx, fixtures.Service(names, ns, app), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := lc.CreateScaledObject(ctx, cluster.ScaledObject{
		Namespace: ns, Name: app, Min: 0, Max: 3,
		Metadata: map[string]string{
			"scalerAddress": s.GRPCAddr().String(), "app": app,
			"targetConcurrency": "10", "rateWindow": "4s",
		},
	}); err != nil {
		t.Fatal(err)
	}

	// An activator holds a request for the app: the scaler hears it at once
	// and KEDA wakes the app.
	push, err := holdpush.NewClient(holdpush.ClientOptions{Activator: "ebb-system/test-activator", Log: testr.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer push.Close()
	push.SetAddresses([]string{s.GRPCAddr().String()})
	woken := time.Now()
	push.Set(holdpush.App{Namespace: ns, Name: app}, 1)
	if err := lc.WaitReplicas(ctx, ns, app, 1, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("held request pushed → KEDA set replicas=1 in %s", time.Since(woken).Round(time.Millisecond))

	// The activator forwards and stops holding; the pod serves through its
	// sidecar, and the scaler counts the request from the sidecar.
	var url = "http://" + svc.Spec.ClusterIP + "/"
	if err := cluster.WaitFor(ctx, 60*time.Second, "the pod serving through the Service", func(ctx context.Context) (bool, error) {
		return get(ctx, url, 2*time.Second) == nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	push.Set(holdpush.App{Namespace: ns, Name: app}, 0)
	if err := cluster.WaitFor(ctx, 10*time.Second, "the scaler to count the request", func(context.Context) (bool, error) {
		st, err := appStatus(s.AdminAddr().String(), ns, app)
		return err == nil && st.RequestsCounted >= 1 && st.Pods == 1, nil
	}); err != nil {
		t.Fatal(err)
	}

	// A long request in flight keeps the app at 1 well past window + cooldown.
	long := make(chan error, 1)
	go func() { long <- get(context.Background(), url+"?delay=12s", 20*time.Second) }()
	if err := cluster.WaitFor(ctx, 5*time.Second, "the long request in flight", func(context.Context) (bool, error) {
		st, err := appStatus(s.AdminAddr().String(), ns, app)
		return err == nil && st.InFlight == 1 && st.Active, nil
	}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(9 * time.Second) // > rateWindow 4s + cooldownPeriod 3s + polling
	d, err := lc.Client.AppsV1().Deployments(ns).Get(ctx, app, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *d.Spec.Replicas != 1 {
		t.Fatalf("replicas = %d while a request was in flight, want 1", *d.Spec.Replicas)
	}
	if err := <-long; err != nil {
		t.Fatalf("the long request: %v", err)
	}

	// No traffic: back to zero after rateWindow and the cooldown.
	idle := time.Now()
	if err := lc.WaitReplicas(ctx, ns, app, 0, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("last request done → KEDA set replicas=0 in %s (rateWindow 4s, cooldownPeriod 3s)", time.Since(idle).Round(time.Millisecond))
}

func get(ctx context.Context, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

func appStatus(admin, ns, app string) (scaler.AppStatus, error) {
	var st scaler.AppStatus
	resp, err := http.Get("http://" + admin + "/apps/" + ns + "/" + app)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("status of %s/%s: %s", ns, app, resp.Status)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}
