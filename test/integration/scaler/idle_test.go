package scaler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/internal/holdpush"
	"github.com/ebb-dev/ebb/scaler"
	"github.com/ebb-dev/ebb/test/cluster"
	"github.com/ebb-dev/ebb/test/fixtures"
)

// TestIdleReasons: the scaler keeps the AppRoute's Idle condition true to
// what keeps the app active, for every reason, with real pods and sidecars,
// a real activator push, and the real KEDA operator asking with the
// ScaledObject's rate window and activation threshold: NoRequests, then
// RequestsHeld (a push), RecentRequests (a request within the window),
// RequestsInFlight naming a long request, BelowActivation (the same
// request under activationConcurrency 5), SidecarBypassed (a pod of the
// app without a sidecar). A second scaler replica runs beside the one
// KEDA asks.
func TestIdleReasons(t *testing.T) {
	ctx := t.Context()
	names := groupsuffix.MustNew(groupsuffix.Default)
	const ns, app = "scaler-idle", "hello"
	if err := lc.EnsureNamespace(ctx, ns, nil); err != nil {
		t.Fatal(err)
	}
	installAppRoutes(t, ns, app)
	s := startScaler(t)
	// A second replica that KEDA does not ask (the ScaledObject names the
	// first): it sees the same pods and pushes but not the 3s rate window,
	// and must not write its own idea of the condition (it did, flapping
	// RecentRequests under the default 1m window against the first one's
	// NoRequests every second).
	startScaler(t)
	if _, err := lc.Client.AppsV1().Deployments(ns).Create(ctx, fixtures.App(names, ns, app, 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc, err := lc.Client.CoreV1().Services(ns).Create(ctx, fixtures.Service(names, ns, app), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + svc.Spec.ClusterIP + "/"
	so := cluster.ScaledObject{Namespace: ns, Name: app, Min: 1, Max: 1,
		Metadata: map[string]string{"scalerAddress": s.GRPCAddr().String(), "app": app, "targetConcurrency": "10", "rateWindow": "3s"}}
	if err := lc.CreateScaledObject(ctx, so); err != nil {
		t.Fatal(err)
	}
	if err := cluster.WaitFor(ctx, 90*time.Second, "the app serving through its Service", func(ctx context.Context) (bool, error) {
		return get(ctx, url, 2*time.Second) == nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(lc.RestConfig)
	if err != nil {
		t.Fatal(err)
	}
	idle := func(ctx context.Context) (*metav1.Condition, error) {
		u, err := dyn.Resource(routingv1alpha1.GroupVersionResource(routingv1alpha1.DefaultGroup)).Namespace(ns).Get(ctx, app, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		var r routingv1alpha1.AppRoute
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &r); err != nil {
			return nil, err
		}
		for i := range r.Status.Conditions {
			if c := &r.Status.Conditions[i]; c.Type == routingv1alpha1.ConditionIdle {
				return c, nil
			}
		}
		return nil, nil
	}
	want := func(status metav1.ConditionStatus, reason, contains string) {
		t.Helper()
		var c *metav1.Condition
		start := time.Now()
		err := cluster.WaitFor(ctx, 30*time.Second, fmt.Sprintf("Idle=%s %s", status, reason), func(ctx context.Context) (bool, error) {
			got, err := idle(ctx)
			if got != nil {
				c = got
			}
			return c != nil && c.Status == status && c.Reason == reason && strings.Contains(c.Message, contains), err
		})
		if err != nil {
			t.Fatalf("%v; the condition: %+v", err, c)
		}
		t.Logf("after %v: Idle=%s %s: %s", time.Since(start).Round(time.Millisecond), c.Status, c.Reason, c.Message)
	}

	want(metav1.ConditionTrue, scaler.ReasonNoRequests, "none in the last 3s")

	push, err := holdpush.NewClient(holdpush.ClientOptions{Activator: "ebb-system/test-activator", Log: testr.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer push.Close()
	push.SetAddresses([]string{s.GRPCAddr().String()})
	push.Set(holdpush.App{Namespace: ns, Name: app}, 2)
	want(metav1.ConditionFalse, scaler.ReasonRequestsHeld, "2 request(s) held")
	push.Set(holdpush.App{Namespace: ns, Name: app}, 0)

	if err := get(ctx, url, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	want(metav1.ConditionFalse, scaler.ReasonRecentRequests, "in the last 3s")
	want(metav1.ConditionTrue, scaler.ReasonNoRequests, "")

	long := make(chan error, 1)
	go func() { long <- get(context.Background(), url+"?delay=15s", 25*time.Second) }()
	want(metav1.ConditionFalse, scaler.ReasonRequestsInFlight, "1 request(s) in flight, without a break for")

	so.Metadata["activationConcurrency"] = "5"
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"triggers": []any{map[string]any{"type": "external-push", "metadata": so.Metadata}}}})
	if _, err := dyn.Resource(cluster.ScaledObjects).Namespace(ns).Patch(ctx, app, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	want(metav1.ConditionTrue, scaler.ReasonBelowActivation, "concurrency 1 is not above activationConcurrency 5")
	if err := <-long; err != nil {
		t.Fatal(err)
	}

	bare := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "hello-without-sidecar", Namespace: ns, Labels: map[string]string{names.AppLabel(): app}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: new(int64),
			Containers:                    []corev1.Container{{Name: "app", Image: "ghcr.io/ebb-dev/ebb-test-app:dev", Args: []string{"--listen=:8080"}}},
		},
	}
	if _, err := lc.Client.CoreV1().Pods(ns).Create(ctx, bare, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	want(metav1.ConditionFalse, scaler.ReasonSidecarBypassed, "1 running pod(s) of app hello have no sidecar")
}
