package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ebb-dev/ebb/test/cluster"
	"github.com/ebb-dev/ebb/test/e2e/install"
)

// TestBackToZero: an app woken by one request goes back to
// zero after the cooldown without traffic, the hand-off slice is published
// again (and was gone while the app served), and a request then wakes it
// again.
func TestBackToZero(t *testing.T) {
	ctx := t.Context()
	a := deployAtZero(t, "e2e-idle", "idle")
	slices, err := install.WatchSlices(ctx, lc, a.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		slices.Stop()
		if t.Failed() {
			t.Logf("EndpointSlices of %s:\n%s", a.Namespace, slices)
			dumpState(t, a.Namespace)
		}
	})
	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

	wake := func(what string) {
		t.Helper()
		diag := make(chan string, 1)
		go func() {
			// What the scalers and activators say while the request is held.
			time.Sleep(3 * time.Second)
			diag <- ebb.Diagnose(ctx, lc, a.Namespace, a.Name) + clientConnections(a.URL)
		}()
		r := install.Get(ctx, client, a.URL, a.Host)
		if r.Err != nil || r.Status != http.StatusOK {
			t.Logf("3 s after the request was sent:\n%s", <-diag)
			t.Fatalf("%s: GET %s (Host %s) = %d %q, %v; want 200\n%s", what, a.URL, a.Host, r.Status, r.Body, r.Err, install.DescribePods(ctx, lc, a.Namespace))
		}
		t.Logf("%s: 200 in %s", what, r.Took.Round(time.Millisecond))
	}
	wake("first wake")
	if err := cluster.WaitFor(ctx, 15*time.Second, "the hand-off slice withdrawn while the app serves", func(ctx context.Context) (bool, error) {
		n, err := ebb.HandOffEndpoints(ctx, lc, a.Namespace, a.Name)
		return n == 0, err
	}); err != nil {
		t.Fatal(err)
	}
	idle := time.Now()

	if err := lc.WaitReplicas(ctx, a.Namespace, a.Name, 0, 90*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("no traffic → KEDA set replicas=0 after %s (rateWindow %s, cooldownPeriod %ds)", time.Since(idle).Round(time.Millisecond), scaling.RateWindow, scaling.Cooldown)
	if err := ebb.WaitAtZero(ctx, lc, a, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("at zero again after %s: pods gone, hand-off slice published, kube-proxy routes to the activator", time.Since(idle).Round(time.Millisecond))
	if err := cluster.WaitFor(ctx, 10*time.Second, "AppRoute status activatorInPath", func(ctx context.Context) (bool, error) {
		route, err := ebb.AppRoute(ctx, lc, a.Namespace, a.Name)
		return err == nil && route.Status.ActivatorInPath && route.Status.ReadyEndpoints == 0, err
	}); err != nil {
		t.Error(err)
	}

	wake("second wake")
	if err := lc.WaitReplicas(ctx, a.Namespace, a.Name, 1, 5*time.Second); err != nil {
		t.Error(err)
	}
}

// clientConnections is where this machine's connections to the ClusterIP
// of url went: the sockets (ss) and kube-proxy's DNAT (conntrack table).
func clientConnections(url string) string {
	ip := strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/")
	var b strings.Builder
	out, err := exec.Command("ss", "-tn", "dst", ip).CombinedOutput()
	fmt.Fprintf(&b, "ss -tn dst %s (%v):\n%s", ip, err, out)
	ct, err := os.ReadFile("/proc/net/nf_conntrack")
	fmt.Fprintf(&b, "conntrack entries to %s (%v):\n", ip, err)
	for _, line := range strings.Split(string(ct), "\n") {
		if strings.Contains(line, "dst="+ip+" ") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}
