package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/ebb-dev/ebb/test/cluster"
	"github.com/ebb-dev/ebb/test/e2e/install"
)

// TestColdStartFigure measures the cold-start figure with the real
// KEDA operator over 10 cold starts: from a request held at zero to its
// 200, minus the app process's own start-up (its container seen running →
// the app answering its readiness path on its own port, polled every 5 ms),
// and requires p50 ≤ 1 s. It runs twice in one run: with the app's
// readiness probe, which the sidecar runs itself (held requests wait for
// it), and without one (ready when the port accepts, as before that), so
// the cost of waiting for the app's own readiness is measured side by side.
func TestColdStartFigure(t *testing.T) {
	ctx := t.Context()
	a := deployAtZero(t, "e2e-figure", "figure")
	with := coldStartFigures(t, a, "readiness probe run by the sidecar")
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d, err := lc.Client.AppsV1().Deployments(a.Namespace).Get(ctx, a.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		d.Spec.Template.Spec.Containers[0].ReadinessProbe = nil
		_, err = lc.Client.AppsV1().Deployments(a.Namespace).Update(ctx, d, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := ebb.WaitAtZero(ctx, lc, a, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	without := coldStartFigures(t, a, "no readiness probe: ready when the port accepts")
	t.Logf("cold start beyond the app's own start-up, p50: %s with the app's readiness probe, %s without (same run)", with.Round(time.Millisecond), without.Round(time.Millisecond))
}

// coldStartFigures runs 10 cold starts of a and returns the p50 figure.
func coldStartFigures(t *testing.T, a *install.AppAtZero, what string) time.Duration {
	ctx := t.Context()
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
	t.Logf("cold start beyond the app's own start-up (%s) over %d cold starts: p50 %s, max %s\n%s", what, runs, p50.Round(time.Millisecond), figures[len(figures)-1].Round(time.Millisecond), table.String())
	if p50 > time.Second {
		t.Errorf("cold-start figure (%s) p50 = %s, want ≤ 1s", what, p50)
	}
	return p50
}
