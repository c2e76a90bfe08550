package cluster

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// Main is the TestMain of every test package that runs against a local
// cluster: it starts one with opts (skipping everything under -short),
// hands it to ready, which keeps it and may set more up (an error fails
// the package), runs the tests and stops the cluster. Use it as
//
//	func TestMain(m *testing.M) {
//		os.Exit(cluster.Main(m, cluster.Options{}, func(_ context.Context, c *cluster.Cluster) error { lc = c; return nil }))
//	}
func Main(m *testing.M, opts Options, ready func(context.Context, *Cluster) error) int {
	if !mainRuns(&opts) {
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute) // includes waiting for other packages' clusters (test/e2e alone runs ~6 min)
	defer cancel()
	c, err := Start(ctx, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "start local cluster:", err)
		return 1
	}
	defer c.Stop()
	if err := ready(ctx, c); err != nil {
		fmt.Fprintf(os.Stderr, "set up the local cluster: %v\n(logs in %s/logs)\n", err, c.Dir)
		return 1
	}
	return m.Run()
}

// mainRuns parses the test flags and says whether a package's clusters
// start (not under -short); it gives opts a Logf printing to stdout.
func mainRuns(opts *Options) bool {
	flag.Parse()
	if testing.Short() {
		fmt.Println("skipping the local-cluster tests in -short mode (make test-integration or make e2e runs them)")
		return false
	}
	if opts.Logf == nil {
		opts.Logf = func(f string, a ...any) { fmt.Printf(f+"\n", a...) }
	}
	return true
}

// ScaledObjects is the resource of KEDA's ScaledObjects.
var ScaledObjects = schema.GroupVersionResource{Group: "keda.sh", Version: "v1alpha1", Resource: "scaledobjects"}

// ScaledObject describes a KEDA ScaledObject with one external-push trigger
// on a Deployment.
type ScaledObject struct {
	Namespace, Name string
	// Target is the Deployment scaled; Name if empty.
	Target string
	// NotReady skips the wait for KEDA to report it Ready.
	NotReady bool
	Min, Max int64
	// PollingInterval and CooldownPeriod in seconds; 1 and 3 if zero.
	PollingInterval, CooldownPeriod int64
	// Metadata of the trigger: scalerAddress and the scaler's own keys.
	Metadata map[string]string
	// AuthenticationRef of the trigger ({name, kind}), if any.
	AuthenticationRef map[string]any
	// HPABehavior, if set, is spec.advanced.horizontalPodAutoscalerConfig.behavior.
	HPABehavior map[string]any
	// FallbackReplicas, if above 0, is spec.fallback: KEDA keeps this many
	// replicas once the scaler failed FallbackFailures times in a row.
	FallbackReplicas, FallbackFailures int64
}

// CreateScaledObject creates the ScaledObject and waits until KEDA reports
// it Ready (its scaler answered and its HPA exists).
func (c *Cluster) CreateScaledObject(ctx context.Context, so ScaledObject) error {
	polling, cooldown := so.PollingInterval, so.CooldownPeriod
	if polling == 0 {
		polling = 1
	}
	if cooldown == 0 {
		cooldown = 3
	}
	meta := map[string]any{}
	for k, v := range so.Metadata {
		meta[k] = v
	}
	spec := map[string]any{
		"scaleTargetRef":  map[string]any{"name": cmp.Or(so.Target, so.Name)},
		"minReplicaCount": so.Min, "maxReplicaCount": so.Max,
		"pollingInterval": polling, "cooldownPeriod": cooldown,
		"triggers": []any{map[string]any{"type": "external-push", "metadata": meta}},
	}
	if so.AuthenticationRef != nil {
		spec["triggers"].([]any)[0].(map[string]any)["authenticationRef"] = so.AuthenticationRef
	}
	if so.FallbackReplicas > 0 {
		spec["fallback"] = map[string]any{"replicas": so.FallbackReplicas, "failureThreshold": so.FallbackFailures}
	}
	if so.HPABehavior != nil {
		spec["advanced"] = map[string]any{"horizontalPodAutoscalerConfig": map[string]any{"behavior": so.HPABehavior}}
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
		"metadata": map[string]any{"name": so.Name, "namespace": so.Namespace},
		"spec":     spec,
	}}
	dyn, err := dynamic.NewForConfig(c.RestConfig)
	if err != nil {
		return fmt.Errorf("dynamic client: %w", err)
	}
	res := dyn.Resource(ScaledObjects).Namespace(so.Namespace)
	if _, err := res.Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create ScaledObject %s/%s: %w", so.Namespace, so.Name, err)
	}
	if so.NotReady {
		return nil
	}
	var last []any
	err = WaitFor(ctx, 60*time.Second, "ScaledObject "+so.Namespace+"/"+so.Name+" Ready", func(ctx context.Context) (bool, error) {
		o, err := res.Get(ctx, so.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last, _, _ = unstructured.NestedSlice(o.Object, "status", "conditions")
		for _, cond := range last {
			if m, ok := cond.(map[string]any); ok && m["type"] == "Ready" && m["status"] == "True" {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("%w; conditions: %v", err, last)
	}
	return nil
}

// MustModuleDir is ModuleDir for a test: it fails the test if the module
// cannot be found.
func MustModuleDir(t testing.TB, module string) string {
	t.Helper()
	dir, err := ModuleDir(module)
	if err != nil {
		t.Fatal(err)
	}
	return dir
}
