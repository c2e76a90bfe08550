package scaler_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/scaler"
	"github.com/ebb-dev/ebb/test/cluster"
	"github.com/ebb-dev/ebb/test/fixtures"
	"github.com/ebb-dev/ebb/test/repo"
)

// installAppRoutes applies ebb's AppRoute CRD (group routing.ebb.dev) and
// creates an AppRoute for each app of ns, as ebb's webhook would.
func installAppRoutes(t *testing.T, ns string, apps ...string) {
	t.Helper()
	ctx := t.Context()
	if err := lc.ApplyCRDs(ctx, filepath.Join(repo.MustRoot(t), "config", "crd")); err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(lc.RestConfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, app := range apps {
		route := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": routingv1alpha1.GroupVersion(routingv1alpha1.DefaultGroup).String(),
			"kind":       routingv1alpha1.Kind,
			"metadata":   map[string]any{"name": app, "namespace": ns},
			"spec": map[string]any{
				"appPort":        int64(8080),
				"scaleTargetRef": map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "name": app},
			},
		}}
		if _, err := dyn.Resource(routingv1alpha1.GroupVersionResource(routingv1alpha1.DefaultGroup)).Namespace(ns).Create(ctx, route, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestScalerRefusalsReachTheScaledObject: a ScaledObject whose app names no
// AppRoute, and one that misspells a metadata key, are refused by the
// scaler with what to fix when the real KEDA operator asks, and the refusal
// shows on the ScaledObject as a Warning event ScalerRefused (kubectl
// describe scaledobject): KEDA v2.21 itself only logs it.
func TestScalerRefusalsReachTheScaledObject(t *testing.T) {
	ctx := t.Context()
	const ns = "scaler-refusals"
	if err := lc.EnsureNamespace(ctx, ns, nil); err != nil {
		t.Fatal(err)
	}
	installAppRoutes(t, ns, "hello", "world")

	s := startScaler(t)

	names := groupsuffix.MustNew(groupsuffix.Default)
	for name, tc := range map[string]struct {
		metadata map[string]string
		want     []string
	}{
		"typo": {
			map[string]string{"app": "hello-typo", "targetConcurrency": "10"},
			[]string{`app "hello-typo": no AppRoute hello-typo in namespace scaler-refusals`, "its apps are: hello, world"},
		},
		"misspelled": {
			map[string]string{"app": "hello", "targetConcurrency": "10", "activationConcurency": "5"},
			[]string{`"activationConcurency"`, `did you mean "activationConcurrency"`},
		},
	} {
		// One Deployment per ScaledObject: KEDA lets one scale each.
		if _, err := lc.Client.AppsV1().Deployments(ns).Create(ctx, fixtures.App(names, ns, name, 0), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tc.metadata["scalerAddress"] = s.GRPCAddr().String()
		if err := lc.CreateScaledObject(ctx, cluster.ScaledObject{Namespace: ns, Name: name, Min: 0, Max: 1, Metadata: tc.metadata, NotReady: true}); err != nil {
			t.Fatal(err)
		}
		var seen string
		err := cluster.WaitFor(ctx, 60*time.Second, "the scaler's refusal of ScaledObject "+name+" on it", func(ctx context.Context) (bool, error) {
			events, err := lc.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=ScaledObject,involvedObject.name=" + name + ",reason=ScalerRefused"})
			if err != nil {
				return false, err
			}
			for _, e := range events.Items {
				seen = e.Message
				if containsAll(e.Message, tc.want) {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			t.Errorf("%v; last ScalerRefused event: %q", err, seen)
		}
	}
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// startScaler runs ebb-scaler in the test process against the local
// cluster, on loopback ports, until the test ends.
func startScaler(t *testing.T) *scaler.Scaler {
	t.Helper()
	opts := scaler.DefaultOptions()
	opts.RestConfig = lc.RestConfig
	opts.GRPCAddr, opts.AdminAddr = "127.0.0.1:0", "127.0.0.1:0"
	log := testr.New(t)
	opts.Logger = &log
	s, err := scaler.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("scaler.Run: %v", err)
		}
	})
	return s
}
