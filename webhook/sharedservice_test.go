package webhook_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/testwait"
)

// TestSecondRouteOfAServiceServesItOnceTheFirstLeaves: two apps name one
// Service; the younger route loses the Service's cluster names to the
// older (ClaimedByOlderRoute). When the older one moves to another
// Service, the younger serves them: its Conflicted turns False at once,
// without any change of its own (no timer re-checks it).
func TestSecondRouteOfAServiceServesItOnceTheFirstLeaves(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	c, _ := newClient(t)
	const ns = "shared-service"
	makeNamespace(t, c, ns, map[string]string{"ebb.dev/inject": "enabled"})
	for _, name := range []string{"web", "elsewhere"} {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"tier": name},
				Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}}}}
		if err := c.Create(ctx, svc); err != nil {
			t.Fatal(err)
		}
	}
	app := func(name string) {
		deploymentChain(t, c, ns, name, appTemplate(map[string]string{"ebb.dev/app": name, "tier": "web"},
			map[string]string{"ebb.dev/hosts": name + ".shared.example.com", "ebb.dev/service": "web"}), 0)
	}
	conflicted := func(name string, status metav1.ConditionStatus, service, message string) func() error {
		return func() error {
			r, err := getRoute(ctx, c, ebbNames, ns, name)
			if err != nil {
				return err
			}
			cond := meta.FindStatusCondition(r.Status.Conditions, routingv1alpha1.ConditionConflicted)
			if r.Spec.Service.Name != service || cond == nil || cond.Status != status || !strings.Contains(cond.Message, message) {
				return fmt.Errorf("%s: Service %q, Conflicted %+v; want Service %s, %s %q", name, r.Spec.Service.Name, cond, service, status, message)
			}
			return nil
		}
	}
	app("first")
	testwait.Check(t, 10*time.Second, conflicted("first", metav1.ConditionFalse, "web", ""))
	time.Sleep(1100 * time.Millisecond) // creation timestamps have whole seconds: second's route is younger
	app("second")
	testwait.Check(t, 10*time.Second, conflicted("second", metav1.ConditionTrue, "web", "(ClaimedByOlderRoute: AppRoute "+ns+"/first serves it)"))

	var first appsv1.Deployment
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "first"}, &first); err != nil {
		t.Fatal(err)
	}
	first.Spec.Template.Annotations["ebb.dev/service"] = "elsewhere"
	first.Spec.Template.Labels["tier"] = "elsewhere"
	if err := c.Update(ctx, &first); err != nil {
		t.Fatal(err)
	}
	testwait.Check(t, 10*time.Second, conflicted("first", metav1.ConditionFalse, "elsewhere", ""))
	testwait.Check(t, 5*time.Second, conflicted("second", metav1.ConditionFalse, "web", "serves every host and path it claims"))
}
