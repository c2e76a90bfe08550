package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/ebb-dev/ebb/test/fleet"
)

// Bounds of TestFleet's idle minute, for all of ebb's ServiceAccounts
// together.
const (
	// fleetRequestBound is the API requests per second ebb may send while
	// 200 apps sit at zero and nothing happens, leader elections included.
	// Measured (2026-11-26, commit e8857a8): 2.45/s, of which 1.92/s on
	// Leases (the suite's release has three activator pools, each with a
	// leader renewing its Lease every 2 s, and the webhook's election), and
	// the activators' readiness GETs of their own pods; what ebb watches
	// comes on its watches. The bound does not grow with the apps.
	fleetRequestBound = 4.0
	// fleetColdStartRatio bounds ebb's part of a cold start in the fleet
	// against a lone app's, medians over fleetWakes and loneWakes; below
	// fleetColdStartFloor above the lone median the difference is this
	// 2-core machine's scheduling noise, not the fleet (ebb's phases are
	// 1–20 ms here, one of them a sidecar readiness check that lands
	// anywhere within the app's own start).
	fleetColdStartRatio = 1.25
	fleetColdStartFloor = 20 * time.Millisecond
	fleetApps           = 200
	fleetNamespaces     = 20
	loneWakes           = 3
	fleetWakes          = 5
)

// TestFleet puts 200 apps at zero, the README's complete example each,
// over 20 namespaces, and checks what an idle fleet costs and that it
// wakes as quickly as a lone app:
//   - first, 3 lone apps (their own namespace, nothing else of the test
//     there yet) are woken one at a time: the median of ebb's part of their
//     cold starts (status.lastColdStart: ScalerTold, SidecarReady,
//     FirstByte; KEDA's Scaled and the pod's start are logged, not in it)
//     is the lone figure; they
//     scale back to zero (cooldown 5 s) while the fleet is made;
//   - then 200 apps are created, every AppRoute must be Ready, Admitted,
//     Propagated and ScaledByKEDA within 2 minutes, and Idle with the
//     activators' hand-off slice serving its Service (activatorInPath);
//   - for 60 s while nothing happens, the API server's audit log (which
//     must go on past the window, and show ebb's Lease renewals in it, or
//     the window proves nothing) must show no write by any of ebb's
//     ServiceAccounts but leader elections' Lease renewals, and fewer than
//     fleetRequestBound requests/s from them all;
//   - 5 random apps of the fleet are woken one at a time: each answers 200,
//     and the median of ebb's part is within 1.25 × the lone figure (or
//     20 ms above it: the machine's noise).
func TestFleet(t *testing.T) {
	ctx := t.Context()
	if lc.AuditLogPath == "" {
		t.Fatal("the suite's cluster runs without the API server's audit log (cluster.Options.AuditLog)")
	}
	lone, err := newFleet(t, "e2e-lone", 1)
	if err != nil {
		t.Fatal(err)
	}
	lone.Cooldown, lone.RateWindow = 5, "3s"
	apps, err := newFleet(t, "e2e-fleet", fleetNamespaces)
	if err != nil {
		t.Fatal(err)
	}
	apps.Workers = 16

	loneApps, last, err := lone.Add(ctx, loneWakes)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lone.WaitRouted(ctx, loneApps, last, time.Minute, false); err != nil {
		t.Fatal(err)
	}
	loneWakesDone := wakeEach(t, lone, loneApps, "lone")
	loneEbb, loneTotal, failed := fleet.Summarize(loneWakesDone)
	if failed > 0 {
		t.Fatalf("%d of %d lone apps did not wake (see above)", failed, loneWakes)
	}

	begin := time.Now()
	if _, last, err = apps.Add(ctx, fleetApps); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d apps applied over %d namespaces in %s", fleetApps, fleetNamespaces, last.Sub(begin).Round(time.Millisecond))
	cv, err := apps.WaitRouted(ctx, apps.Apps, last, 2*time.Minute, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("every AppRoute Ready, Admitted, Propagated and ScaledByKEDA %s after the last apply", cv.Routed.Round(time.Millisecond))
	if cv.Idle == 0 {
		// The scalers' Idle writes would fall in the idle minute.
		t.Errorf("not every AppRoute Idle and handed off to the activators 2 minutes after the last apply: %s", cv.Last)
	} else {
		t.Logf("every AppRoute Idle and handed off to the activators %s after the last apply", cv.Idle.Round(time.Millisecond))
	}
	if err := lone.WaitAtZero(ctx, nil, time.Minute); err != nil {
		t.Fatalf("the lone apps after their wakes: %v", err)
	}

	audit := fleet.NewAudit(lc.AuditLogPath)
	from := time.Now()
	time.Sleep(60 * time.Second)
	to := time.Now()
	time.Sleep(3 * time.Second) // requests received before `to` are logged once answered
	// The window counts only if the log goes on past it: a log no longer
	// written would show no request at all.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Second) {
		if err := audit.Advance(); err != nil {
			t.Fatal(err)
		}
		if !audit.Last().Before(to) || time.Now().After(deadline) {
			break
		}
	}
	if audit.Last().Before(to) {
		t.Fatalf("the audit log %s has no request received at or after the idle window's end %s (the last at %s): it is not being written, the window cannot be counted",
			lc.AuditLogPath, to.Format(time.RFC3339Nano), audit.Last().Format(time.RFC3339Nano))
	}
	rates := audit.Window(from, to)
	var requests, leaseRequests, writes, leaseWrites int
	var table strings.Builder
	for _, cr := range fleet.Sorted(rates) {
		fmt.Fprintf(&table, "  %-60s %6.2f req/s (%d on Leases)  %d writes (%d of Leases)  %d watches started, %d open  %s\n",
			cr.Client, cr.PerSecond(cr.Requests), cr.LeaseRequests, cr.Writes, cr.LeaseWrites, cr.Watches, cr.OpenWatches, cr.WroteSummary())
		if strings.HasPrefix(cr.Client, "system:serviceaccount:"+ebb.Namespace+":") {
			requests += cr.Requests
			leaseRequests += cr.LeaseRequests
			writes += cr.Writes
			leaseWrites += cr.LeaseWrites
		}
	}
	secs := to.Sub(from).Seconds()
	perSecond := float64(requests) / secs
	t.Logf("60 s idle with %d apps at zero, API clients (audit log):\n%s", fleetApps, table.String())
	t.Logf("ebb's ServiceAccounts: %.2f requests/s (%.2f/s on Leases), %d writes, of which %d of Leases", perSecond, float64(leaseRequests)/secs, writes, leaseWrites)
	// The pool leaders renew their Leases every 2 s (≥ 20 writes in 60 s):
	// none means the log or its accounting here misses ebb's requests, and
	// 0 writes and a low rate would pass for nothing.
	if leaseWrites == 0 {
		t.Errorf("no Lease write by ebb's ServiceAccounts (system:serviceaccount:%s:*) in 60 s, want > 0 (≥ 20 expected: the activator pools' leaders renew every 2 s): the audit log or this test's accounting of it is broken, and the bounds below prove nothing", ebb.Namespace)
	}
	if writes-leaseWrites > 0 {
		t.Errorf("ebb's ServiceAccounts wrote %d times (leader elections' Leases aside) in 60 s while nothing changed, want 0", writes-leaseWrites)
	}
	if perSecond > fleetRequestBound {
		t.Errorf("ebb's ServiceAccounts sent %.2f API requests/s while %d apps sat at zero, want ≤ %.1f", perSecond, fleetApps, fleetRequestBound)
	}

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0))
	var picked []fleet.App
	for _, i := range rng.Perm(len(apps.Apps))[:fleetWakes] {
		picked = append(picked, apps.Apps[i])
	}
	fleetWakesDone := wakeEach(t, apps, picked, "fleet")
	fleetEbb, fleetTotal, failed := fleet.Summarize(fleetWakesDone)
	if failed > 0 {
		t.Errorf("%d of %d apps of the fleet did not wake (see above)", failed, fleetWakes)
	}
	t.Logf("ebb's part of a cold start, median (max): lone %s, in a fleet of %d %s; the client's total: lone %s, fleet %s",
		loneEbb, fleetApps, fleetEbb, loneTotal, fleetTotal)
	t.Logf("KEDA's Scaled phase (push → Deployment scaled, not in ebb's part), median (max): lone %s, fleet %s",
		fleet.Phase(loneWakesDone, "Scaled"), fleet.Phase(fleetWakesDone, "Scaled"))
	bound := max(time.Duration(fleetColdStartRatio*float64(loneEbb.Median)), loneEbb.Median+fleetColdStartFloor)
	if fleetEbb.N > 0 && fleetEbb.Median > bound {
		t.Errorf("ebb's part of a cold start in a fleet of %d: median %s, want ≤ max(%.2f ×, +%s) a lone app's %s = %s",
			fleetApps, fleetEbb.Median.Round(time.Millisecond), fleetColdStartRatio, fleetColdStartFloor, loneEbb.Median.Round(time.Millisecond), bound.Round(time.Millisecond))
	}
}

// newFleet is fleet.New on the suite's cluster, with the deletion of the
// fleet's namespaces registered at once, even when New failed part way:
// the fleet must not stay in the shared cluster. The deletion has its own
// 3 minutes, after the test's context has ended.
func newFleet(t *testing.T, prefix string, namespaces int) (*fleet.Fleet, error) {
	f, err := fleet.New(t.Context(), lc, ebb, prefix, namespaces, logf)
	if f != nil {
		cleanupCtx := context.WithoutCancel(t.Context())
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(cleanupCtx, 3*time.Minute)
			defer cancel()
			if err := f.Delete(ctx, 3*time.Minute); err != nil {
				t.Errorf("clean-up of %s-*: %v", prefix, err)
			}
		})
	}
	return f, err
}

// wakeEach wakes apps one at a time and logs each wake.
func wakeEach(t *testing.T, f *fleet.Fleet, apps []fleet.App, what string) []fleet.Wake {
	t.Helper()
	wakes := f.WakeEach(t.Context(), apps)
	for _, w := range wakes {
		t.Logf("%s wake %s", what, w)
	}
	return wakes
}
