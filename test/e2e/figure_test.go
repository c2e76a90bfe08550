package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ebb-dev/ebb/test/cluster"
	"github.com/ebb-dev/ebb/test/e2e/install"
)

// TestColdStartFigure measures the cold-start figure with the real
// KEDA operator over 10 cold starts: from a request held at zero to its
// 200, minus the app process's own start-up (its container seen running →
// the app answering its readiness path on its own port, polled every 5 ms),
// and requires p50 ≤ 1 s.
func TestColdStartFigure(t *testing.T) {
	ctx := t.Context()
	a := deployAtZero(t, "e2e-figure", "figure")
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	const runs = 10
	var figures []time.Duration
	var table strings.Builder
	fmt.Fprintf(&table, "  run  held→served  app start→answers  figure   KEDA replicas=1\n")
	for i := range runs {
		tl := ebb.WatchColdStart(ctx, lc, a)
		tl.Mark(install.EventFirstRequest)
		r := install.Get(ctx, client, a.URL, a.Host)
		_ = cluster.WaitFor(ctx, 5*time.Second, "the app answering", func(context.Context) (bool, error) {
			_, ok := tl.At(install.EventAppAnswers)
			return ok, nil
		})
		tl.Stop()
		if r.Err != nil || r.Status != http.StatusOK {
			t.Fatalf("cold start %d: %d %q %v\n%s", i+1, r.Status, r.Body, r.Err, tl)
		}
		served := r.Took
		startup, ok := tl.Since(install.EventAppRunning, install.EventAppAnswers)
		if !ok {
			t.Fatalf("cold start %d: app start-up not observed:\n%s", i+1, tl)
		}
		keda, _ := tl.Since(install.EventFirstRequest, install.EventReplicas1)
		fig := served - max(startup, 0)
		figures = append(figures, fig)
		fmt.Fprintf(&table, "  %3d  %11s  %17s  %7s  %s\n", i+1, served.Round(time.Millisecond), startup.Round(time.Millisecond), fig.Round(time.Millisecond), keda.Round(time.Millisecond))
		if i == runs-1 {
			break
		}
		if err := ebb.WaitAtZero(ctx, lc, a, 2*time.Minute); err != nil {
			t.Fatal(err)
		}
		// Right after the app reaches zero a request can be lost (see
		// TestBackToZero, which fails on it); this figure is about the cold
		// start itself, so it lets the scale-down settle.
		time.Sleep(2 * time.Second)
	}
	slices.Sort(figures)
	p50 := figures[len(figures)/2]
	t.Logf("cold start beyond the app's own start-up over %d cold starts: p50 %s, max %s\n%s", runs, p50.Round(time.Millisecond), figures[len(figures)-1].Round(time.Millisecond), table.String())
	if p50 > time.Second {
		t.Errorf("cold-start figure p50 = %s, want ≤ 1s", p50)
	}
}
