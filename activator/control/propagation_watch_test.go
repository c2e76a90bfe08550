package control

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/test/repo"
)

// The leader's propagation counts the changes of AppRoutes through the
// manager cache's informers (a real kube-apiserver): a change it did not
// count would leave a walk skipped and a condition stale.
func TestPropagationCountsAppRouteChanges(t *testing.T) {
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
	names := groupsuffix.MustNew(groupsuffix.Default)
	c := Config{Names: names, PodName: "act-0", PodNamespace: "default", ActivatorSelector: "app=activator", Pool: DefaultPool, AdminPort: 1, Resync: time.Hour}
	mgr, err := newManager(cfg, c, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() { _ = mgr.GetCache().Start(ctx) }()
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		t.Fatal("cache did not sync")
	}
	p := &propagation{log: logr.Discard(), src: &sources{cfg: c, cache: mgr.GetCache()}}
	p.startWatch(ctx)
	if !p.watching {
		t.Fatal("changes not counted with the manager's cache")
	}
	before := p.changes.Load()
	if _, err := dynamic.NewForConfigOrDie(cfg).Resource(routingv1alpha1.GroupVersionResource(names.Group())).Namespace("default").Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": routingv1alpha1.GroupVersion(names.Group()).String(),
		"kind":       routingv1alpha1.Kind,
		"metadata":   map[string]any{"name": "shop", "namespace": "default"},
		"spec": map[string]any{
			"appPort":        int64(8080),
			"hosts":          []any{"shop.example.com"},
			"scaleTargetRef": map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "name": "shop"},
		},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for p.changes.Load() == before {
		if time.Now().After(deadline) {
			t.Fatal("an AppRoute created was not counted as a change in 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
