package e2e

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"
)

// TestHeldRequestWaitsForAppReadiness: an app at zero whose port opens
// at once but whose own readiness probe fails for its first 3 s (an app
// warming caches behind a readiness gate). The held request is answered by
// the app only once that probe passes: the webhook handed the probe to the
// sidecar, whose /ready the activator follows.
func TestHeldRequestWaitsForAppReadiness(t *testing.T) {
	ctx := t.Context()
	a := deployAtZero(t, "e2e-readiness", "warming")
	t.Cleanup(func() {
		if t.Failed() {
			dumpState(t, a.Namespace)
		}
	})
	const warm = 3 * time.Second
	setAppEnv(t, a, "READY_AFTER", warm.String())
	rctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, a.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = a.Host
	start := time.Now()
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		t.Fatalf("held request: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	t.Logf("held request answered %d after %v by %q, X-App-Ready: %q", resp.StatusCode, took.Round(time.Millisecond), body, resp.Header.Get("X-App-Ready"))
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-App-Ready") != "true" {
		t.Errorf("held request: %d, X-App-Ready %q: want 200 from an app whose readiness probe passes", resp.StatusCode, resp.Header.Get("X-App-Ready"))
	}
	if took < warm {
		t.Errorf("answered after %v, before the app's %v warm-up", took, warm)
	}
}
