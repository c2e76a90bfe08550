package e2e

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/ebb-dev/ebb/test/cluster"
	"github.com/ebb-dev/ebb/test/e2e/install"
)

// scaling is the ScaledObject timing of the scenarios: KEDA polls every
// second and scales to zero 5 s after the scaler last saw traffic in its
// 3 s window.
var scaling = install.Scaling{Max: 3, PollingInterval: 1, Cooldown: 5, TargetConcurrency: 100, RateWindow: "3s"}

func deployAtZero(t *testing.T, ns, name string) *install.AppAtZero {
	t.Helper()
	a, err := ebb.DeployAtZero(t.Context(), lc, ns, name, scaling, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	if a.StartedAtOne {
		t.Logf("NOTE: the webhook made no AppRoute for a Deployment created at 0 replicas; it was created at 1 and KEDA scaled it to 0")
	}
	return a
}

// TestColdStart: an app at zero, 200 concurrent requests to
// its Service's ClusterIP (kube-proxy → the activator's hand-off slice) are
// held, KEDA wakes the app on the scaler's push, and every request is
// answered 200 by the app's pod.
func TestColdStart(t *testing.T) {
	ctx := t.Context()
	a := deployAtZero(t, "e2e-cold", "hello")
	t.Cleanup(func() {
		if t.Failed() {
			dumpState(t, a.Namespace)
		}
	})

	tl := ebb.WatchColdStart(ctx, lc, a)
	const n = 200
	tl.Mark(install.EventFirstRequest)
	results := install.Send(ctx, a.URL, a.Host, n, 90*time.Second)
	// The activator forwards as soon as it reaches the pod's sidecar, which
	// may be before the pod's Ready condition is written.
	_ = cluster.WaitFor(ctx, 30*time.Second, "pod Ready", func(context.Context) (bool, error) {
		_, ok := tl.At(install.EventPodReady)
		return ok, nil
	})
	tl.Stop()
	for _, r := range results {
		if r.Status == http.StatusOK {
			tl.MarkAt(install.EventFirstResponse, r.Sent.Add(r.Took))
		}
		tl.MarkAt(install.EventLastResponse, r.Sent.Add(r.Took))
	}
	t.Logf("cold start of %s/%s with %d concurrent requests:\n%s", a.Namespace, a.Name, n, tl)
	if err := install.Failures(results); err != nil {
		t.Errorf("of %d requests, not 200:\n%v", n, err)
	}
	statuses := map[int]int{}
	for _, r := range results {
		statuses[r.Status]++
	}
	if diff := cmp.Diff(map[int]int{http.StatusOK: n}, statuses); diff != "" {
		t.Errorf("statuses (-want +got):\n%s", diff)
	}
	// Every answer is the app's (the test app names its pod), not the
	// activator's.
	pods, err := ebb.PodsOf(ctx, lc, a.Namespace, a.Name)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, p := range pods {
		names[p.Name] = true
		if len(p.Spec.InitContainers) == 0 {
			t.Errorf("pod %s has no injected sidecar", p.Name)
		}
	}
	for _, r := range results {
		if r.Status == http.StatusOK && !answeredBy(r.Body, names) {
			t.Errorf("a 200 not from an app pod %v: %q", names, r.Body)
			break
		}
	}
	for _, step := range []string{install.EventScalerHeld, install.EventReplicas1, install.EventPodReady, install.EventFirstResponse} {
		if _, ok := tl.At(step); !ok {
			t.Errorf("timeline: %q not seen", step)
		}
	}
	if d, ok := tl.Since(install.EventFirstRequest, install.EventFirstResponse); ok {
		t.Logf("held → first response: %s", d.Round(time.Millisecond))
	}
}

func answeredBy(body string, pods map[string]bool) bool {
	for p := range pods {
		if strings.Contains(body, p) {
			return true
		}
	}
	return false
}

// dumpState writes kube-proxy's nftables table and the namespace's
// EndpointSlices into the cluster's log directory, which outlives the run.
func dumpState(t *testing.T, ns string) {
	t.Helper()
	dir := filepath.Join(lc.Dir, "logs")
	nft, err := exec.Command("nft", "list", "table", "ip", "kube-proxy").CombinedOutput()
	if err != nil {
		t.Logf("nft list table ip kube-proxy: %v", err)
	}
	slices, err := lc.Client.DiscoveryV1().EndpointSlices(ns).List(context.Background(), metav1.ListOptions{})
	var y []byte
	if err == nil {
		y, err = yaml.Marshal(slices)
	}
	if err != nil {
		t.Logf("endpoint slices of %s: %v", ns, err)
	}
	name := strings.ReplaceAll(t.Name(), "/", "_")
	for file, b := range map[string][]byte{name + "-nft.txt": nft, name + "-slices.yaml": y} {
		if err := os.WriteFile(filepath.Join(dir, file), b, 0o644); err != nil {
			t.Log(err)
		}
	}
	t.Logf("kube-proxy's nftables and the EndpointSlices of %s at the failure: %s/%s-{nft.txt,slices.yaml}", ns, dir, name)
}
