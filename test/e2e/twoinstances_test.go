package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/test/e2e/install"
)

// TestTwoInstances: a second release with the group suffix
// team1.example.com beside the default one; each cold-starts its own app,
// and neither instance's AppRoutes, hand-off EndpointSlices or sidecars
// appear in the other's app namespace.
func TestTwoInstances(t *testing.T) {
	ctx := t.Context()
	team1 := installSecond(t, "team1", "team1.example.com")
	apps := map[*install.Release]*install.AppAtZero{}
	for _, inst := range []struct {
		r       *install.Release
		ns, app string
	}{{ebb, "e2e-shop-ebb", "shop"}, {team1, "e2e-shop-team1", "shop"}} {
		a, err := inst.r.DeployAtZero(ctx, lc, inst.ns, inst.app, scaling, t.Logf)
		if err != nil {
			t.Fatalf("instance %s: %v", inst.r.Names.Suffix(), err)
		}
		apps[inst.r] = a
	}
	for r, a := range apps {
		results := install.Send(ctx, a.URL, a.Host, 20, 60*time.Second)
		if err := install.Failures(results); err != nil {
			t.Errorf("instance %s, app %s/%s: of 20 requests, not 200:\n%v", r.Names.Suffix(), a.Namespace, a.Name, err)
			continue
		}
		t.Logf("instance %s cold-started %s/%s: 20 × 200", r.Names.Suffix(), a.Namespace, a.Name)
	}

	dyn, err := dynamic.NewForConfig(lc.RestConfig)
	if err != nil {
		t.Fatal(err)
	}
	for r, a := range apps {
		for other, b := range apps {
			// AppRoutes of r's group exist only in r's app namespace.
			list, err := dyn.Resource(routingv1alpha1.GroupVersionResource(r.Names.Group())).Namespace(b.Namespace).List(ctx, metav1.ListOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
			n := 0
			if list != nil {
				n = len(list.Items)
			}
			want := 0
			if r == other {
				want = 1
			}
			if n != want {
				t.Errorf("AppRoutes of %s in namespace %s: %d, want %d", r.Names.Group(), b.Namespace, n, want)
			}
			// Hand-off slices managed by r's activator only for r's app
			// (published again once the app is back at zero; at least none
			// in the other namespace now).
			slices, err := lc.Client.DiscoveryV1().EndpointSlices(b.Namespace).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelManagedBy + "=" + r.Names.EndpointSliceManagedBy()})
			if err != nil {
				t.Fatal(err)
			}
			if r != other && len(slices.Items) != 0 {
				t.Errorf("EndpointSlices managed by %s in namespace %s of instance %s: %d, want 0", r.Names.EndpointSliceManagedBy(), b.Namespace, other.Names.Suffix(), len(slices.Items))
			}
		}
		// Each pod of r's app carries exactly one sidecar, r's.
		pods, err := r.PodsOf(ctx, lc, a.Namespace, a.Name)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods {
			var got []string
			for _, c := range p.Spec.InitContainers {
				got = append(got, c.Name)
			}
			if diff := cmp.Diff([]string{"ebb-sidecar"}, got); diff != "" {
				t.Errorf("init containers of %s/%s (-want +got):\n%s", p.Namespace, p.Name, diff)
			}
			if _, ok := p.Annotations[r.Names.SidecarAnnotation()]; !ok {
				t.Errorf("pod %s/%s lacks %s's sidecar annotation %s: %v", p.Namespace, p.Name, r.Names.Suffix(), r.Names.SidecarAnnotation(), p.Annotations)
			}
		}
	}
}

// installSecond installs another release of the chart, one replica of each
// component, with the group suffix and more values, and uninstalls it when
// the test ends.
func installSecond(t *testing.T, name, suffix string, set ...string) *install.Release {
	t.Helper()
	r, err := install.Install(t.Context(), lc, install.Options{
		Release: name, Namespace: name + "-ebb", GroupSuffix: suffix, Logf: t.Logf,
		Set: append([]string{"webhook.replicas=1", "activator.replicas=1", "scaler.replicas=1"}, set...),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		if err := r.Uninstall(ctx, lc); err != nil {
			t.Errorf("uninstall %s: %v", name, err)
		}
	})
	return r
}
