package webhook_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/testwait"
	"github.com/ebb-dev/ebb/test/cluster"
)

// TestScaledByKEDA: an AppRoute says whether a KEDA ScaledObject scales its
// app: Unknown while KEDA's API is not installed, False with what to do
// until a ScaledObject's external-push trigger names the app, True naming
// it. KEDA's own ScaledObject CRD, from its module, is installed mid-test.
func TestScaledByKEDA(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	c, _ := newClient(t)
	makeNamespace(t, c, "scaled", map[string]string{"ebb.dev/inject": "enabled"})
	d, _ := deploymentChain(t, c, "scaled", "hello", appTemplate(map[string]string{"ebb.dev/app": "hello"}, nil), 0)
	scaledBy := func(status metav1.ConditionStatus, reason, message string) func() error {
		return func() error {
			r, err := getRoute(ctx, c, ebbNames, "scaled", "hello")
			if err != nil {
				return err
			}
			cond := meta.FindStatusCondition(r.Status.Conditions, routingv1alpha1.ConditionScaledByKEDA)
			if cond == nil || cond.Status != status || cond.Reason != reason || !strings.Contains(cond.Message, message) {
				return fmt.Errorf("ScaledByKEDA = %+v, want %s %s %q", cond, status, reason, message)
			}
			return nil
		}
	}
	// touch brings a reconcile at once (else it comes within a minute).
	touch := func(v string) {
		t.Helper()
		var cur appsv1.Deployment
		if err := c.Get(ctx, client.ObjectKeyFromObject(d), &cur); err != nil {
			t.Fatal(err)
		}
		cur.Spec.Template.Annotations = map[string]string{"test/touch": v}
		if err := c.Update(ctx, &cur); err != nil {
			t.Fatal(err)
		}
	}
	testwait.Check(t, 10*time.Second, scaledBy(metav1.ConditionUnknown, "KEDANotInstalled", "KEDA's ScaledObject API is not installed"))

	dir, err := cluster.ModuleDir("github.com/kedacore/keda/v2")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := envtest.InstallCRDs(env.Config, envtest.CRDInstallOptions{Paths: []string{filepath.Join(dir, "config", "crd", "bases", "keda.sh_scaledobjects.yaml")}}); err != nil {
		t.Fatal(err)
	}
	touch("1")
	testwait.Check(t, 20*time.Second, scaledBy(metav1.ConditionFalse, "NoScaledObject", `no KEDA ScaledObject in scaled scales Deployment hello with an external-push trigger whose app is "hello"`))

	so := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
		"metadata": map[string]any{"name": "hello", "namespace": "scaled"},
		"spec": map[string]any{
			"scaleTargetRef": map[string]any{"name": "hello"},
			"triggers": []any{map[string]any{"type": "external-push", "metadata": map[string]any{
				"scalerAddress": "ebb-scaler.ebb-system:9090", "app": "hello", "targetConcurrency": "10"}}},
		},
	}}
	if err := c.Create(ctx, so); err != nil {
		t.Fatal(err)
	}
	touch("2")
	testwait.Check(t, 10*time.Second, scaledBy(metav1.ConditionTrue, "ScaledObjectFound", "ScaledObject hello scales Deployment hello on this app's counts (scalerAddress ebb-scaler.ebb-system:9090)"))
}
