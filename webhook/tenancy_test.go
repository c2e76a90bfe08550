package webhook_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/testwait"
)

// TestTenantCannotTakeAnotherNamespacesNames (issue 34): an app in another
// namespace may not list shop's cluster names, a single label or an IP
// (refused at admission, each named); one created first that lists
// api.<shop> (which admission cannot tell from an outside domain) and a
// host that a DomainClaim binds to shop is told on its Conflicted condition
// that it serves neither, and shop's own route serves both.
func TestTenantCannotTakeAnotherNamespacesNames(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	c, _ := newClient(t)
	shop, squat := "tenant-shop", "tenant-squat"
	for _, ns := range []string{shop, squat} {
		makeNamespace(t, c, ns, map[string]string{"ebb.dev/inject": "enabled"})
	}

	_, err := createPod(ctx, c, squat, "refused", appTemplate(map[string]string{"ebb.dev/app": "squat"},
		map[string]string{"ebb.dev/hosts": "api." + shop + ".svc.cluster.local,api." + shop + ".svc,api,198.19.7.7"}))
	if err == nil {
		t.Fatal("a pod listing another namespace's cluster names was admitted")
	}
	for _, w := range []string{
		`host "api.` + shop + `.svc.cluster.local" is a cluster name of namespace "` + shop + `"`,
		`host "api.` + shop + `.svc" is a cluster name of namespace "` + shop + `"`,
		`host "api" is a single label`,
		`host "198.19.7.7" is an IP address`,
	} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("refusal %q\nlacks %q", err.Error(), w)
		}
	}

	deploymentChain(t, c, squat, "squat", appTemplate(map[string]string{"ebb.dev/app": "squat"},
		map[string]string{"ebb.dev/hosts": "api." + shop + ",shop.tenancy.example.com,squat.tenancy.example.com"}), 0)
	testwait.Check(t, 10*time.Second, func() error {
		_, err := getRoute(ctx, c, ebbNames, squat, "squat")
		return err
	})
	time.Sleep(1100 * time.Millisecond) // creation timestamps have whole seconds: shop's route is younger
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: shop, Name: "api"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app.kubernetes.io/name": "api"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}}},
	}
	if err := c.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	deploymentChain(t, c, shop, "api", appTemplate(map[string]string{"ebb.dev/app": "api"},
		map[string]string{"ebb.dev/hosts": "shop.tenancy.example.com"}), 0)

	conflicted := func(ns, name string) (*metav1.Condition, error) {
		r, err := getRoute(ctx, c, ebbNames, ns, name)
		if err != nil {
			return nil, err
		}
		if r.Spec.Service.Name == "" && ns == shop {
			return nil, fmt.Errorf("shop's route names no Service yet")
		}
		cond := meta.FindStatusCondition(r.Status.Conditions, routingv1alpha1.ConditionConflicted)
		if cond == nil {
			return nil, fmt.Errorf("%s/%s has no Conflicted condition", ns, name)
		}
		return cond, nil
	}
	// Without a DomainClaim, the older route keeps shop.tenancy.example.com
	// (first come), but never shop's Service name.
	testwait.Check(t, 15*time.Second, func() error {
		cond, err := conflicted(squat, "squat")
		if err != nil {
			return err
		}
		if cond.Status != metav1.ConditionTrue || cond.Reason != "ServiceOfAnotherNamespace" ||
			!strings.Contains(cond.Message, "host api."+shop+" path / (ServiceOfAnotherNamespace: AppRoute "+shop+"/api serves it)") ||
			strings.Contains(cond.Message, "shop.tenancy.example.com") {
			return fmt.Errorf("squatter's Conflicted = %+v", cond)
		}
		cond, err = conflicted(shop, "api")
		if err != nil {
			return err
		}
		if cond.Status != metav1.ConditionTrue || !strings.Contains(cond.Message, "host shop.tenancy.example.com path / (ClaimedByOlderRoute: AppRoute "+squat+"/squat serves it)") {
			return fmt.Errorf("shop's Conflicted before the DomainClaim = %+v", cond)
		}
		return nil
	})

	// A cluster admin binds the domain to shop: shop serves it, old claims
	// of other namespaces or not.
	claim := &unstructured.Unstructured{}
	claim.SetGroupVersionKind(routingv1alpha1.GroupVersion(ebbNames.Group()).WithKind(routingv1alpha1.DomainClaimKind))
	claim.SetName("tenancy.example.com")
	claim.Object["spec"] = map[string]any{"namespace": shop}
	if err := c.Create(ctx, claim); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), claim) })
	testwait.Check(t, 15*time.Second, func() error {
		cond, err := conflicted(shop, "api")
		if err != nil {
			return err
		}
		if cond.Status != metav1.ConditionFalse {
			return fmt.Errorf("shop's Conflicted after the DomainClaim = %+v", cond)
		}
		cond, err = conflicted(squat, "squat")
		if err != nil {
			return err
		}
		if cond.Status != metav1.ConditionTrue || !strings.Contains(cond.Message, "host shop.tenancy.example.com (DomainClaimedByAnotherNamespace)") ||
			!strings.Contains(cond.Message, "host squat.tenancy.example.com (DomainClaimedByAnotherNamespace)") {
			return fmt.Errorf("squatter's Conflicted after the DomainClaim = %+v", cond)
		}
		return nil
	})

	// The API server refuses a claim in the cluster domain, under any
	// cluster domain, or of an IP address.
	for _, name := range []string{"shop.svc.cluster.local", "api.shop.svc.corp.example", "x.pod.corp.example", "10.96.0.5", "cluster.local"} {
		bad := &unstructured.Unstructured{}
		bad.SetGroupVersionKind(claim.GroupVersionKind())
		bad.SetName(name)
		bad.Object["spec"] = map[string]any{"namespace": squat}
		if err := c.Create(ctx, bad); err == nil || !strings.Contains(err.Error(), "outside the cluster domain") {
			t.Errorf("a DomainClaim %s: %v, want refused", name, err)
		}
	}
}
