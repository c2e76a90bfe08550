package control

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/ebb-dev/ebb/webhook/webhooktest"
)

// apiServer starts a kube-apiserver of the test's own (envtest) with the
// namespace ebb-system, stopped when the test ends; under -short the test
// is skipped.
func apiServer(t *testing.T) (*rest.Config, kubernetes.Interface) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a kube-apiserver (envtest; make test-integration runs it)")
	}
	assets, err := webhooktest.Assets()
	if err != nil {
		t.Fatal(err)
	}
	env := &envtest.Environment{BinaryAssetsDirectory: assets}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start kube-apiserver (envtest): %v", err)
	}
	t.Cleanup(func() { env.Stop() })
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ebb-system"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return cfg, kube
}
