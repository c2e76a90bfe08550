package webhook_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/internal/testwait"
	"github.com/ebb-dev/ebb/webhook"
)

// zeroDeployment creates a Deployment at 0 replicas, as a scale-to-zero user
// with a KEDA ScaledObject does: no ReplicaSet, no pod, no admission.
func zeroDeployment(t *testing.T, c client.Client, ns, name string, labels, annotations map[string]string) *appsv1.Deployment {
	t.Helper()
	zero := int32(0)
	tmpl := appTemplate(labels, annotations)
	tmpl.Labels["app.kubernetes.io/name"] = name
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{Replicas: &zero, Template: tmpl,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": name}}},
	}
	if err := c.Create(context.Background(), d); err != nil {
		t.Fatalf("create Deployment %s/%s: %v", ns, name, err)
	}
	return d
}

// updateTemplate changes a Deployment's pod template with mod.
func updateTemplate(t *testing.T, c client.Client, d *appsv1.Deployment, mod func(*corev1.PodTemplateSpec)) {
	t.Helper()
	ctx := context.Background()
	var cur appsv1.Deployment
	if err := c.Get(ctx, client.ObjectKeyFromObject(d), &cur); err != nil {
		t.Fatal(err)
	}
	mod(&cur.Spec.Template)
	if err := c.Update(ctx, &cur); err != nil {
		t.Fatalf("update Deployment %s/%s: %v", d.Namespace, d.Name, err)
	}
}

func labelNamespace(t *testing.T, c client.Client, name string, labels map[string]string) {
	t.Helper()
	ctx := context.Background()
	var ns corev1.Namespace
	if err := c.Get(ctx, client.ObjectKey{Name: name}, &ns); err != nil {
		t.Fatal(err)
	}
	ns.Labels = labels
	if err := c.Update(ctx, &ns); err != nil {
		t.Fatalf("label namespace %s: %v", name, err)
	}
}

// routeOf is what a route says a user sees: where it sends which hosts, and
// who owns it.
type routeOf struct {
	Hosts  []string
	Target string
	Owner  string
}

// waitRoute waits until the AppRoute of names' group is want.
func waitRoute(t *testing.T, c client.Client, names groupsuffix.Names, ns, name string, want routeOf) {
	t.Helper()
	testwait.Check(t, 10*time.Second, func() error {
		r, err := getRoute(context.Background(), c, names, ns, name)
		if err != nil {
			return err
		}
		got := routeOf{Hosts: r.Spec.Hosts, Target: r.Spec.ScaleTargetRef.Name}
		for _, o := range r.OwnerReferences {
			if o.Controller != nil && *o.Controller && o.Kind == "Deployment" {
				got.Owner = o.Name
			}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			return fmt.Errorf("AppRoute %s/%s in %s (-want +got):\n%s", ns, name, names.Group(), diff)
		}
		return nil
	})
}

// waitNoRoute waits until the AppRoute is gone.
func waitNoRoute(t *testing.T, c client.Client, names groupsuffix.Names, ns, name string) {
	t.Helper()
	testwait.Check(t, 10*time.Second, func() error {
		if _, err := getRoute(context.Background(), c, names, ns, name); !apierrors.IsNotFound(err) {
			return fmt.Errorf("AppRoute %s/%s in %s: get = %v, want NotFound", ns, name, names.Group(), err)
		}
		return nil
	})
}

// stillNoRoute checks, a while after the controller had its chance, that
// the AppRoute was never created.
func stillNoRoute(t *testing.T, c client.Client, names groupsuffix.Names, ns, name string) {
	t.Helper()
	time.Sleep(time.Second)
	r, err := getRoute(context.Background(), c, names, ns, name)
	switch {
	case err == nil:
		t.Errorf("AppRoute %s/%s in %s exists (spec %+v); want none", ns, name, names.Group(), r.Spec)
	case !apierrors.IsNotFound(err):
		t.Errorf("AppRoute %s/%s in %s: get = %v, want NotFound", ns, name, names.Group(), err)
	}
}

// TestRoutesDeploymentCreatedAtZero: a Deployment created at 0 replicas gets
// its AppRoute from its template, which follows the template and goes when
// the app opts out.
func TestRoutesDeploymentCreatedAtZero(t *testing.T) {
	needEnv(t)
	c, _ := newClient(t)
	ns := "zero"
	makeNamespace(t, c, ns, map[string]string{"ebb.dev/inject": "enabled"})
	d := zeroDeployment(t, c, ns, "cold", map[string]string{"ebb.dev/app": "cold"}, map[string]string{"ebb.dev/hosts": "cold.example.com"})
	waitRoute(t, c, ebbNames, ns, "cold", routeOf{Hosts: []string{"cold.example.com"}, Target: "cold", Owner: "cold"})
	r, err := getRoute(context.Background(), c, ebbNames, ns, "cold")
	if err != nil {
		t.Fatal(err)
	}
	tr := true
	if diff := cmp.Diff([]metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "cold", UID: d.UID, Controller: &tr}}, r.OwnerReferences); diff != "" {
		t.Errorf("owner (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(routingv1alpha1.ScaleTargetReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "cold"}, r.Spec.ScaleTargetRef); diff != "" {
		t.Errorf("scale target (-want +got):\n%s", diff)
	}

	updateTemplate(t, c, d, func(p *corev1.PodTemplateSpec) {
		p.Annotations["ebb.dev/hosts"] = "cold.example.org,www.cold.example.org"
	})
	waitRoute(t, c, ebbNames, ns, "cold", routeOf{Hosts: []string{"cold.example.org", "www.cold.example.org"}, Target: "cold", Owner: "cold"})

	// Renaming the app moves the route to the new name.
	updateTemplate(t, c, d, func(p *corev1.PodTemplateSpec) { p.Labels["ebb.dev/app"] = "chilly" })
	waitRoute(t, c, ebbNames, ns, "chilly", routeOf{Hosts: []string{"cold.example.org", "www.cold.example.org"}, Target: "cold", Owner: "cold"})
	waitNoRoute(t, c, ebbNames, ns, "cold")

	updateTemplate(t, c, d, func(p *corev1.PodTemplateSpec) { delete(p.Labels, "ebb.dev/app") })
	waitNoRoute(t, c, ebbNames, ns, "chilly")
}

// TestRoutesWhenNamespaceLabelled: labelling the namespace later routes the
// Deployments already there; removing the label removes their routes.
func TestRoutesWhenNamespaceLabelled(t *testing.T) {
	needEnv(t)
	c, _ := newClient(t)
	ns := "zero-late"
	makeNamespace(t, c, ns, nil)
	zeroDeployment(t, c, ns, "late", map[string]string{"ebb.dev/app": "late"}, map[string]string{"ebb.dev/hosts": "late.example.com"})
	stillNoRoute(t, c, ebbNames, ns, "late")

	labelNamespace(t, c, ns, map[string]string{"ebb.dev/inject": "enabled"})
	waitRoute(t, c, ebbNames, ns, "late", routeOf{Hosts: []string{"late.example.com"}, Target: "late", Owner: "late"})

	labelNamespace(t, c, ns, map[string]string{"ebb.dev/inject": "disabled"})
	waitNoRoute(t, c, ebbNames, ns, "late")
}

// TestZeroTwoInstances: in a namespace labelled for both instances, an app
// whose template carries both app labels is routed only by the instance
// that injects its pods (ebb.dev: its webhook configuration's name sorts
// first), and an app labelled for one instance only by that one.
func TestZeroTwoInstances(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	c, _ := newClient(t)
	ns := "zero-both"
	makeNamespace(t, c, ns, map[string]string{"ebb.dev/inject": "enabled", "team1.example.com/inject": "enabled"})
	both := map[string]string{"ebb.dev/app": "dual", "team1.example.com/app": "dual"}
	hosts := map[string]string{"ebb.dev/hosts": "dual.ebb.example", "team1.example.com/hosts": "dual.team1.example"}
	_, podTmpl := deploymentChain(t, c, ns, "dual", appTemplate(both, hosts), 0)
	zeroDeployment(t, c, ns, "solo", map[string]string{"team1.example.com/app": "solo"}, map[string]string{"team1.example.com/hosts": "solo.team1.example"})

	waitRoute(t, c, ebbNames, ns, "dual", routeOf{Hosts: []string{"dual.ebb.example"}, Target: "dual", Owner: "dual"})
	waitRoute(t, c, t1Names, ns, "solo", routeOf{Hosts: []string{"solo.team1.example"}, Target: "solo", Owner: "solo"})
	stillNoRoute(t, c, t1Names, ns, "dual")
	stillNoRoute(t, c, ebbNames, ns, "solo")

	// The pods agree: ebb.dev injects them.
	pod, err := createPod(ctx, c, ns, "dual-1", podTmpl)
	if err != nil {
		t.Fatalf("create pod: %v", err)
	}
	if n := sidecars(pod); n != 1 || pod.Annotations["ebb.dev/sidecar"] == "" {
		t.Errorf("pod of dual: %d sidecars, annotations %v; want one, from ebb.dev", n, pod.Annotations)
	}

	// Labels alike from a suffix that sorts first but names no installed
	// instance (no webhook configuration) take nothing from ebb.dev.
	foreign := "zero-foreign"
	makeNamespace(t, c, foreign, map[string]string{"ebb.dev/inject": "enabled", "aaa.example.com/inject": "enabled"})
	zeroDeployment(t, c, foreign, "mixed", map[string]string{"ebb.dev/app": "mixed", "aaa.example.com/app": "mixed"}, nil)
	waitRoute(t, c, ebbNames, foreign, "mixed", routeOf{Target: "mixed", Owner: "mixed"})

	// Labelling an ebb.dev-only namespace for team1 too leaves dual with
	// ebb.dev; removing ebb.dev's label hands it to team1.
	handover := "zero-handover"
	makeNamespace(t, c, handover, map[string]string{"ebb.dev/inject": "enabled"})
	zeroDeployment(t, c, handover, "dual", both, hosts)
	waitRoute(t, c, ebbNames, handover, "dual", routeOf{Hosts: []string{"dual.ebb.example"}, Target: "dual", Owner: "dual"})
	labelNamespace(t, c, handover, map[string]string{"ebb.dev/inject": "enabled", "team1.example.com/inject": "enabled"})
	stillNoRoute(t, c, t1Names, handover, "dual")
	labelNamespace(t, c, handover, map[string]string{"team1.example.com/inject": "enabled"})
	waitRoute(t, c, t1Names, handover, "dual", routeOf{Hosts: []string{"dual.team1.example"}, Target: "dual", Owner: "dual"})
	waitNoRoute(t, c, ebbNames, handover, "dual")
}

// TestZeroAppNameClash: two Deployments with one app name do not take the
// AppRoute in turns: the older keeps it, the other gets it when the older
// goes. ("new" sorts before "old" by name: only age makes "old" win.)
func TestZeroAppNameClash(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	c, _ := newClient(t)
	ns := "zero-clash"
	makeNamespace(t, c, ns, map[string]string{"ebb.dev/inject": "enabled"})
	old := zeroDeployment(t, c, ns, "old", map[string]string{"ebb.dev/app": "clash"}, map[string]string{"ebb.dev/hosts": "old.example.com"})
	waitRoute(t, c, ebbNames, ns, "clash", routeOf{Hosts: []string{"old.example.com"}, Target: "old", Owner: "old"})
	time.Sleep(1100 * time.Millisecond) // creation timestamps have one-second resolution
	zeroDeployment(t, c, ns, "new", map[string]string{"ebb.dev/app": "clash"}, map[string]string{"ebb.dev/hosts": "new.example.com"})
	time.Sleep(time.Second)
	waitRoute(t, c, ebbNames, ns, "clash", routeOf{Hosts: []string{"old.example.com"}, Target: "old", Owner: "old"})

	// envtest runs no garbage collector: the route outlives "old" until "new"
	// takes it over.
	if err := c.Delete(ctx, old); err != nil {
		t.Fatal(err)
	}
	waitRoute(t, c, ebbNames, ns, "clash", routeOf{Hosts: []string{"new.example.com"}, Target: "new", Owner: "new"})
}

// TestOtherInstanceInstalledLater: an app labelled for ebb.dev and for an
// instance not installed is ebb.dev's; once that instance's webhook
// configuration appears (its name sorts first, so it would inject the
// pods), ebb.dev leaves it the app within seconds, and takes it back when
// the configuration goes: the controller watches webhook configurations.
func TestOtherInstanceInstalledLater(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	c, _ := newClient(t)
	ns := "zero-later"
	makeNamespace(t, c, ns, map[string]string{"ebb.dev/inject": "enabled", "aab.example.com/inject": "enabled"})
	zeroDeployment(t, c, ns, "mixed", map[string]string{"ebb.dev/app": "mixed", "aab.example.com/app": "mixed"}, nil)
	waitRoute(t, c, ebbNames, ns, "mixed", routeOf{Target: "mixed", Owner: "mixed"})
	time.Sleep(2 * time.Second) // the route's own writes and their reconciles are over

	url := "https://127.0.0.1:1/inject"
	mwc := webhook.Configuration(groupsuffix.MustNew("aab.example.com"), webhook.ConfigurationOptions{
		FailurePolicy: admissionregistrationv1.Ignore, ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url}})
	// It injects nothing here: it selects no object of this test.
	mwc.Webhooks[0].ObjectSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"test/never": "selected"}}
	if err := c.Create(ctx, mwc); err != nil {
		t.Fatal(err)
	}
	testwait.Check(t, 5*time.Second, func() error {
		if _, err := getRoute(ctx, c, ebbNames, ns, "mixed"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("AppRoute of an app another installed instance injects: get = %v, want NotFound", err)
		}
		return nil
	})
	if err := c.Delete(ctx, mwc); err != nil {
		t.Fatal(err)
	}
	testwait.Check(t, 5*time.Second, func() error {
		_, err := getRoute(ctx, c, ebbNames, ns, "mixed")
		return err
	})
}
