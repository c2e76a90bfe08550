package e2e

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/ebb-dev/ebb/test/e2e/install"
)

// TestNoLossWhileScalingToZero: requests that arrive while KEDA takes the
// app to zero (from the moment replicas=0 is written, one every 100 ms for
// 3 s) are all answered 200: by the last pod while it still serves, then by
// the activator, which holds them and wakes the app again. The hand-off
// slice is published before the last pod stops serving, and the pod must
// keep serving until every Service consumer (here kube-proxy) has moved.
func TestNoLossWhileScalingToZero(t *testing.T) {
	ctx := t.Context()
	a := deployAtZero(t, "e2e-down", "down")
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	if r := install.Get(ctx, client, a.URL, a.Host); r.Err != nil || r.Status != http.StatusOK {
		t.Fatalf("wake: %d %q %v", r.Status, r.Body, r.Err)
	}
	if err := lc.WaitReplicas(ctx, a.Namespace, a.Name, 0, 90*time.Second); err != nil {
		t.Fatal(err)
	}
	const n = 30
	results := make([]install.Result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = install.Get(ctx, client, a.URL, a.Host)
		}()
		time.Sleep(100 * time.Millisecond)
	}
	wg.Wait()
	if err := install.Failures(results); err != nil {
		for i, r := range results {
			if r.Err != nil || r.Status != http.StatusOK {
				t.Logf("request %d sent %s after replicas=0 was seen: %d %v (after %s)", i, (time.Duration(i) * 100 * time.Millisecond), r.Status, r.Err, r.Took.Round(time.Millisecond))
			}
		}
		t.Errorf("of %d requests sent while the app went to zero, not 200:\n%v", n, err)
	}
}
