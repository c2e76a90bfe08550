package webhook_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/testwait"
)

// TestScaledByKEDA: an AppRoute says whether a KEDA ScaledObject scales its
// app: Unknown while KEDA's API is not installed, False with what to do
// until a ScaledObject's external-push trigger names the app, True naming
// it. KEDA's own ScaledObject CRD, from its module, is installed mid-test:
// the running controller finds it (its look for the API, every 2 s in
// these tests, a minute otherwise) and watches ScaledObjects from then on,
// so the condition follows them within seconds, without any other change
// to the app.
func TestScaledByKEDA(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	c, _ := newClient(t)
	makeNamespace(t, c, "scaled", map[string]string{"ebb.dev/inject": "enabled"})
	deploymentChain(t, c, "scaled", "hello", appTemplate(map[string]string{"ebb.dev/app": "hello"}, nil), 0)
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
	testwait.Check(t, 10*time.Second, scaledBy(metav1.ConditionUnknown, "KEDANotInstalled", "KEDA's ScaledObject API is not installed"))

	installKEDACRD(t, env.Config)
	noScaledObject := scaledBy(metav1.ConditionFalse, "NoScaledObject", `no KEDA ScaledObject in scaled scales Deployment hello with an external-push trigger whose app is "hello"`)
	testwait.Check(t, 10*time.Second, noScaledObject)

	// One naming the app but scaling another workload does not count.
	other := scaledObject("scaled", "other", "another", "hello")
	if err := c.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	testwait.Check(t, 5*time.Second, scaledBy(metav1.ConditionFalse, "NoScaledObject", "ScaledObjects naming this app but scaling another workload: other (scales another)"))

	so := scaledObject("scaled", "hello", "hello", "hello")
	if err := c.Create(ctx, so); err != nil {
		t.Fatal(err)
	}
	testwait.Check(t, 5*time.Second, scaledBy(metav1.ConditionTrue, "ScaledObjectFound", "ScaledObject hello scales Deployment hello on this app's counts (scalerAddress ebb-scaler.ebb-system:9090)"))

	// The trigger renamed to another app: the app it named before loses it.
	if err := unstructured.SetNestedSlice(so.Object, []any{map[string]any{"type": "external-push", "metadata": map[string]any{
		"scalerAddress": "ebb-scaler.ebb-system:9090", "app": "renamed", "targetConcurrency": "10"}}}, "spec", "triggers"); err != nil {
		t.Fatal(err)
	}
	if err := c.Update(ctx, so); err != nil {
		t.Fatal(err)
	}
	testwait.Check(t, 5*time.Second, noScaledObject)

	// Named again, then deleted.
	if err := c.Delete(ctx, so); err != nil {
		t.Fatal(err)
	}
	so = scaledObject("scaled", "hello", "hello", "hello")
	if err := c.Create(ctx, so); err != nil {
		t.Fatal(err)
	}
	testwait.Check(t, 5*time.Second, scaledBy(metav1.ConditionTrue, "ScaledObjectFound", "ScaledObject hello"))
	if err := c.Delete(ctx, so); err != nil {
		t.Fatal(err)
	}
	testwait.Check(t, 5*time.Second, noScaledObject)
}
