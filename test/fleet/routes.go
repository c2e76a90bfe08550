package fleet

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/test/cluster"
)

// Routed are the AppRoute conditions that say an app at zero is served
// and wakes: the "Admitted, Propagated and ScaledByKEDA", with
// Ready (the webhook's: its Service exists and reaches the sidecar).
var Routed = []string{
	routingv1alpha1.ConditionReady,
	routingv1alpha1.ConditionAdmitted,
	routingv1alpha1.ConditionPropagated,
	routingv1alpha1.ConditionScaledByKEDA,
}

// RouteCounts says how many of the apps asked about have an AppRoute, one
// with every Routed condition True, one whose Idle is True, and one whose
// Service the activators' hand-off slice serves (status.activatorInPath).
type RouteCounts struct {
	Apps, Routes, Routed, Idle, HandedOff int
	// True counts the routes with each of Routed True.
	True map[string]int
	// NotRouted names one route that is not, with its conditions.
	NotRouted string
}

func (c RouteCounts) String() string {
	s := fmt.Sprintf("%d of %d AppRoutes, %d routed (", c.Routes, c.Apps, c.Routed)
	for i, t := range Routed {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%s %d", t, c.True[t])
	}
	return s + fmt.Sprintf("), %d Idle, %d handed off to the activators", c.Idle, c.HandedOff)
}

// Routes lists the AppRoutes of the fleet's namespaces and counts those of
// apps.
func (f *Fleet) Routes(ctx context.Context, apps []App) (RouteCounts, error) {
	want := make(map[string]bool, len(apps))
	for _, a := range apps {
		want[a.Namespace+"/"+a.Name] = true
	}
	c := RouteCounts{Apps: len(apps), True: map[string]int{}}
	gvr := routingv1alpha1.GroupVersionResource(f.Release.Names.Group())
	// One list of every namespace's, not one per namespace: the fleet's
	// own reads stay small beside what it measures.
	list, err := f.Dyn.Resource(gvr).List(ctx, metav1.ListOptions{})
	if err != nil {
		return c, fmt.Errorf("list AppRoutes: %w", err)
	}
	for _, u := range list.Items {
		if !want[u.GetNamespace()+"/"+u.GetName()] {
			continue
		}
		var r routingv1alpha1.AppRoute
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &r); err != nil {
			return c, fmt.Errorf("AppRoute %s/%s: %w", u.GetNamespace(), u.GetName(), err)
		}
		c.Routes++
		routed := true
		for _, t := range Routed {
			if meta.IsStatusConditionTrue(r.Status.Conditions, t) {
				c.True[t]++
			} else {
				routed = false
			}
		}
		if routed {
			c.Routed++
		} else if c.NotRouted == "" {
			c.NotRouted = fmt.Sprintf("%s/%s: %s", r.Namespace, r.Name, conditions(r.Status.Conditions))
		}
		if meta.IsStatusConditionTrue(r.Status.Conditions, routingv1alpha1.ConditionIdle) {
			c.Idle++
		}
		if r.Status.ActivatorInPath {
			c.HandedOff++
		}
	}
	return c, nil
}

func conditions(cs []metav1.Condition) string {
	s := ""
	for _, c := range cs {
		s += fmt.Sprintf("%s=%s(%s) ", c.Type, c.Status, c.Reason)
	}
	return s
}

// Convergence is how long the fleet's AppRoutes took after the last apply.
type Convergence struct {
	// Routed is until every app's AppRoute had every Routed condition
	// True; Idle until every one had Idle True too and its Service the
	// hand-off slice (an app at zero at rest: nothing left to write); 0 if
	// not within the timeout.
	Routed, Idle time.Duration
	Last         RouteCounts
}

// WaitRouted polls the AppRoutes of apps every 2 s from lastApply until
// every one is routed and, with idle, Idle and handed off too, or timeout, logging
// progress every 15 s. It fails only if they are not all routed.
func (f *Fleet) WaitRouted(ctx context.Context, apps []App, lastApply time.Time, timeout time.Duration, idle bool) (Convergence, error) {
	var cv Convergence
	logged := time.Now()
	err := poll(ctx, 2*time.Second, timeout, "every AppRoute routed and Idle", func(ctx context.Context) (bool, error) {
		c, err := f.Routes(ctx, apps)
		if err != nil {
			return false, err
		}
		cv.Last = c
		if cv.Routed == 0 && c.Routed == len(apps) {
			cv.Routed = time.Since(lastApply)
			f.Logf("every AppRoute routed %s after the last apply", cv.Routed.Round(time.Second))
		}
		if cv.Idle == 0 && c.Idle == len(apps) && c.HandedOff == len(apps) {
			cv.Idle = time.Since(lastApply)
		}
		if time.Since(logged) > 15*time.Second {
			logged = time.Now()
			f.Logf("%s after the last apply: %s", time.Since(lastApply).Round(time.Second), c)
		}
		return cv.Routed > 0 && (cv.Idle > 0 || !idle), nil
	})
	if cv.Routed == 0 {
		return cv, fmt.Errorf("%w: %s; e.g. %s", err, cv.Last, cv.Last.NotRouted)
	}
	if err != nil && idle {
		f.Logf("not every AppRoute Idle within %s: %s", timeout, cv.Last)
	}
	return cv, nil
}

// WaitKEDAReady polls the ScaledObjects of apps every 2 s until KEDA
// reports every one Ready (its scaler answered and its HPA exists) and
// returns how long after lastApply that was, or how many were not when
// timeout ends.
func (f *Fleet) WaitKEDAReady(ctx context.Context, apps []App, lastApply time.Time, timeout time.Duration) (time.Duration, error) {
	want := make(map[string]bool, len(apps))
	for _, a := range apps {
		want[a.Namespace+"/"+a.Name] = true
	}
	ready := 0
	logged := time.Now()
	err := poll(ctx, 2*time.Second, timeout, "KEDA Ready on every ScaledObject", func(ctx context.Context) (bool, error) {
		ready = 0
		list, err := f.Dyn.Resource(cluster.ScaledObjects).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, fmt.Errorf("list ScaledObjects: %w", err)
		}
		for _, u := range list.Items {
			if !want[u.GetNamespace()+"/"+u.GetName()] {
				continue
			}
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			for _, c := range conds {
				if m, ok := c.(map[string]any); ok && m["type"] == "Ready" && m["status"] == "True" {
					ready++
				}
			}
		}
		if time.Since(logged) > 15*time.Second {
			logged = time.Now()
			f.Logf("%s after the last apply: KEDA Ready on %d of %d ScaledObjects", time.Since(lastApply).Round(time.Second), ready, len(apps))
		}
		return ready == len(apps), nil
	})
	if err != nil {
		return 0, fmt.Errorf("%w: %d of %d Ready", err, ready, len(apps))
	}
	return time.Since(lastApply), nil
}
