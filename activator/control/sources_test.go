package control

import (
	"context"
	"errors"
	"testing"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/routing"
)

// A DomainClaim stays in force when a later list of the claims fails: a
// binding must not lapse, and hand its domain to the oldest route of any
// namespace, because a read failed.
func TestDomainClaimsSurviveAFailedList(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := routingv1alpha1.AddToScheme(scheme, "routing.ebb.dev"); err != nil {
		t.Fatal(err)
	}
	claim := &routingv1alpha1.DomainClaim{ObjectMeta: metav1.ObjectMeta{Name: "shop.example.com"}, Spec: routingv1alpha1.DomainClaimSpec{Namespace: "shop"}}
	fail := false
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(claim).WithInterceptorFuncs(interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if fail {
				return errors.New("cache not started")
			}
			return c.List(ctx, list, opts...)
		},
	}).Build()
	s := &sources{cache: c, log: logr.Discard()}
	want := routing.Claims{"shop.example.com": "shop"}
	if d := cmp.Diff(want, s.domainClaims(t.Context())); d != "" {
		t.Fatalf("claims listed (-want +got):\n%s", d)
	}
	fail = true
	if d := cmp.Diff(want, s.domainClaims(t.Context())); d != "" {
		t.Errorf("claims after a failed list (-want +got):\n%s", d)
	}
}
