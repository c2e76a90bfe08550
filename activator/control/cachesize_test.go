package control

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/test/fixtures"
	"github.com/ebb-dev/ebb/test/repo"
)

// heapAfterSync starts a replica's manager cache on cfg's API server,
// waits for it to sync and returns the live heap then (and stops it).
func heapAfterSync(t *testing.T, cfg *rest.Config, c Config) uint64 {
	t.Helper()
	runtime.GC()
	mgr, err := newManager(cfg, c, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); _ = mgr.GetCache().Start(ctx) }()
	sctx, scancel := context.WithTimeout(ctx, time.Minute)
	defer scancel()
	if !mgr.GetCache().WaitForCacheSync(sctx) {
		t.Fatal("cache did not sync")
	}
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	runtime.KeepAlive(mgr)
	cancel()
	<-done
	return ms.HeapAlloc
}

// TestCacheBytesPerApp: what an activator replica's API cache holds per
// app at zero (its AppRoute, Deployment, Service and hand-off
// EndpointSlice, as the API server serves them, managedFields and all),
// measured as the live heap after the cache synced with 200 apps minus
// with none: 13.2 KB with whole objects, 6.0 KB without managedFields and
// with Deployments kept to their replicas.
func TestCacheBytesPerApp(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector inflates the heap")
	}
	if testing.Short() {
		t.Skip("needs a kube-apiserver (envtest; make test-integration runs it)")
	}
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		assets = filepath.Join(repo.MustRoot(t), "bin", "k8s")
	}
	env := &envtest.Environment{BinaryAssetsDirectory: assets, CRDDirectoryPaths: []string{filepath.Join(repo.MustRoot(t), "config", "crd")}, ErrorIfCRDPathMissing: true}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start kube-apiserver (envtest): %v", err)
	}
	t.Cleanup(func() { env.Stop() })
	cfg.QPS, cfg.Burst = 5000, 5000
	kube := kubernetes.NewForConfigOrDie(cfg)
	dyn := dynamic.NewForConfigOrDie(cfg)
	ctx := t.Context()
	names := groupsuffix.MustNew(groupsuffix.Default)
	for _, ns := range []string{"ebb-system", "fleet"} {
		if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	c := Config{Names: names, PodName: "activator-0", PodNamespace: "ebb-system", ActivatorSelector: "app.kubernetes.io/name=ebb-activator", Pool: "default", HandoffPort: 8080, AdminPort: 8081, SidecarAdminPort: 9091, Resync: time.Hour}
	empty := heapAfterSync(t, cfg, c)

	const n = 200 // envtest's Service range holds 253
	for i := range n {
		app := fmt.Sprintf("app-%03d", i)
		if _, err := kube.AppsV1().Deployments("fleet").Create(ctx, fixtures.App(names, "fleet", app, 0), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		svc, err := kube.CoreV1().Services("fleet").Create(ctx, fixtures.Service(names, "fleet", app), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := dyn.Resource(routingv1alpha1.GroupVersionResource(names.Group())).Namespace("fleet").Create(ctx, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": routingv1alpha1.GroupVersion(names.Group()).String(),
			"kind":       routingv1alpha1.Kind,
			"metadata":   map[string]any{"name": app, "namespace": "fleet"},
			"spec": map[string]any{
				"appPort":        int64(8080),
				"hosts":          []any{app + ".example.com"},
				"scaleTargetRef": map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "name": app},
			},
		}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := kube.DiscoveryV1().EndpointSlices("fleet").Create(ctx, &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: app + "-ebb-default", Labels: map[string]string{
				discoveryv1.LabelServiceName: svc.Name, discoveryv1.LabelManagedBy: names.EndpointSliceManagedBy(),
				names.Key(RouteLabel): app, names.Key(PoolLabel): "default"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.7"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080)}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	full := heapAfterSync(t, cfg, c)
	per := (int64(full) - int64(empty)) / n
	t.Logf("an activator's cache: %d bytes per app at zero (%d apps: %d bytes of heap, none: %d)", per, n, full, empty)
	const bound = 8 << 10
	if per > bound {
		t.Errorf("%d bytes per app in the cache, want under %d", per, bound)
	}
}
