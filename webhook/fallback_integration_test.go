package webhook_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/testwait"
)

// wantFallbackRefused waits for app's FallbackReady False with reason, and
// checks that its AppRoute gives the activator no spec.fallback.
func wantFallbackRefused(t *testing.T, ctx context.Context, c client.Client, ns, app, reason string) {
	t.Helper()
	testwait.Check(t, 10*time.Second, func() error {
		if err := wantCondition(ctx, c, ns, app, routingv1alpha1.ConditionFallbackReady, metav1.ConditionFalse, reason); err != nil {
			return err
		}
		r, err := getRoute(ctx, c, ebbNames, ns, app)
		if err != nil {
			return err
		}
		if r.Spec.Fallback != nil {
			return fmt.Errorf("FallbackReady False/%s, yet spec.fallback %+v: the activator would send held requests there", reason, *r.Spec.Fallback)
		}
		return nil
	})
}

// TestFallbackOfHandWrittenEndpointsRefused: a tenant names as its fallback
// a selector-less Service of its own whose EndpointSlice (which any editor
// of the namespace may write) lists another namespace's pod and an
// activator's pod. The activator would dial the Service's ClusterIP and
// kube-proxy deliver the held requests, from the activators (which every
// ebb namespace admits), to the other tenant's pod or back into the
// activators. FallbackReady is False (NoSelector) and the AppRoute has no
// spec.fallback.
func TestFallbackOfHandWrittenEndpointsRefused(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	c, _ := newClient(t)
	ns := "fb-relay"
	makeNamespace(t, c, ns, map[string]string{"ebb.dev/inject": "enabled"})
	relay := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "relay"}, Spec: corev1.ServiceSpec{
		Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}} // no selector
	if err := c.Create(ctx, relay); err != nil {
		t.Fatal(err)
	}
	sl := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "relay-1", Labels: map[string]string{discoveryv1.LabelServiceName: "relay"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.244.7.7"}}, {Addresses: []string{"10.244.0.5"}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(int32(8012))}}}
	if err := c.Create(ctx, sl); err != nil {
		t.Fatal(err)
	}
	deploymentChain(t, c, ns, "thief", appTemplate(map[string]string{"ebb.dev/app": "thief"}, map[string]string{"ebb.dev/fallback": "relay:80"}), 1)
	wantFallbackRefused(t, ctx, c, ns, "thief", "NoSelector")
}

// TestFallbackWithoutClusterIPRefused: the activator dials only a
// fallback's ClusterIP, which an ExternalName or headless Service has not:
// FallbackReady says so (ExternalName, NoClusterIP), not True, and the
// AppRoute has no spec.fallback.
func TestFallbackWithoutClusterIPRefused(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	c, _ := newClient(t)
	ns := "fb-noip"
	makeNamespace(t, c, ns, map[string]string{"ebb.dev/inject": "enabled"})
	for reason, svc := range map[string]*corev1.Service{
		"ExternalName": {ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ext"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "sorry.example.com",
			Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}},
		"NoClusterIP": {ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "headless"}, Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"app": "sorry"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}},
	} {
		if err := c.Create(ctx, svc); err != nil {
			t.Fatal(err)
		}
		app := "to-" + svc.Name
		deploymentChain(t, c, ns, app, appTemplate(map[string]string{"ebb.dev/app": app}, map[string]string{"ebb.dev/fallback": svc.Name + ":80"}), 1)
		wantFallbackRefused(t, ctx, c, ns, app, reason)
	}
}

// TestFallbackIsAnotherEbbAppRefused: the Service of another ebb app of
// the instance leads, at zero, back to the activators (its hand-off
// slice): a loop. FallbackReady False (FallbackIsEbbApp), no
// spec.fallback, also when that app comes after the fallback was taken.
func TestFallbackIsAnotherEbbAppRefused(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	c, _ := newClient(t)
	ns := "fb-ebbapp"
	makeNamespace(t, c, ns, map[string]string{"ebb.dev/inject": "enabled"})
	sorry := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sorry"}, Spec: corev1.ServiceSpec{
		Selector: map[string]string{"app.kubernetes.io/name": "sorry"}, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}
	if err := c.Create(ctx, sorry); err != nil {
		t.Fatal(err)
	}
	deploymentChain(t, c, ns, "main", appTemplate(map[string]string{"ebb.dev/app": "main"}, map[string]string{"ebb.dev/fallback": "sorry:80"}), 1)
	testwait.Check(t, 10*time.Second, func() error {
		return wantCondition(ctx, c, ns, "main", routingv1alpha1.ConditionFallbackReady, metav1.ConditionTrue, "ServiceFound")
	})
	// Now the fallback's pods become an ebb app: its AppRoute names sorry.
	deploymentChain(t, c, ns, "sorry", appTemplate(map[string]string{"ebb.dev/app": "sorry"}, nil), 1)
	wantFallbackRefused(t, ctx, c, ns, "main", "FallbackIsEbbApp")
}
