package webhook_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/testwait"
	"github.com/ebb-dev/ebb/test/workers"
)

func statefulSet(t *testing.T, c client.Client, ns, name string, tmpl corev1.PodTemplateSpec) *appsv1.StatefulSet {
	t.Helper()
	tmpl = *tmpl.DeepCopy()
	tmpl.Labels["app.kubernetes.io/name"] = name
	s := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: appsv1.StatefulSetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": name}},
		Template: tmpl, ServiceName: name + "-pods",
	}}
	if err := c.Create(context.Background(), s); err != nil {
		t.Fatalf("create StatefulSet: %v", err)
	}
	return s
}

func routeTarget(ctx context.Context, c client.Client, ns, name string) (routingv1alpha1.ScaleTargetReference, []metav1.OwnerReference, error) {
	r, err := getRoute(ctx, c, ebbNames, ns, name)
	if err != nil {
		return routingv1alpha1.ScaleTargetReference{}, nil, err
	}
	return r.Spec.ScaleTargetRef, r.OwnerReferences, nil
}

// wantEventOn is wantEvent for a workload of any kind.
func wantEventOn(ctx context.Context, c client.Client, ns, kind, name, reason, note string) error {
	var list eventsv1.EventList
	if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return err
	}
	var seen []string
	for _, e := range list.Items {
		if e.Regarding.Kind == kind && e.Regarding.Name == name {
			seen = append(seen, e.Reason+": "+e.Note)
			if e.Reason == reason && strings.Contains(e.Note, note) {
				return nil
			}
		}
	}
	return fmt.Errorf("no event %s with %q on %s %s/%s; its events: %q", reason, note, kind, ns, name, seen)
}

// TestStatefulSetApp: a StatefulSet labelled as an app gets its AppRoute,
// owned by it and scaling it; its governing headless Service is passed
// over for a ClusterIP one, and alone it makes SidecarReachable say why
// ebb cannot count through it.
func TestStatefulSetApp(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	c, _ := newClient(t)
	ns := "sts"
	makeNamespace(t, c, ns, map[string]string{"ebb.dev/inject": "enabled"})
	s := statefulSet(t, c, ns, "db", appTemplate(map[string]string{"ebb.dev/app": "db"}, nil))
	tr := true
	testwait.Check(t, 10*time.Second, func() error {
		ref, owners, err := routeTarget(ctx, c, ns, "db")
		if err != nil {
			return err
		}
		want := routingv1alpha1.ScaleTargetReference{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "db"}
		wantOwners := []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "db", UID: s.UID, Controller: &tr}}
		if d := cmp.Diff(want, ref) + cmp.Diff(wantOwners, owners); d != "" {
			return fmt.Errorf("scaleTargetRef, owners (-want +got):\n%s", d)
		}
		return nil
	})

	sel := map[string]string{"app.kubernetes.io/name": "db"}
	headless := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db-pods"}, Spec: corev1.ServiceSpec{
		ClusterIP: corev1.ClusterIPNone, Selector: sel,
		Ports: []corev1.ServicePort{{Name: "web", Port: 8080, TargetPort: intstr.FromString("http")}},
	}}
	if err := c.Create(ctx, headless); err != nil {
		t.Fatal(err)
	}
	testwait.Check(t, 10*time.Second, func() error {
		if err := wantCondition(ctx, c, ns, "db", routingv1alpha1.ConditionSidecarReachable, metav1.ConditionFalse, "HeadlessService"); err != nil {
			return err
		}
		r, _ := getRoute(ctx, c, ebbNames, ns, "db")
		if m := meta.FindStatusCondition(r.Status.Conditions, routingv1alpha1.ConditionSidecarReachable).Message; !strings.Contains(m, "ClusterIP Service") || !strings.Contains(m, "targetPort: http") {
			return fmt.Errorf("message %q does not name the fix", m)
		}
		return nil
	})
	// A ClusterIP Service named after the headless one in order still wins.
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"}, Spec: corev1.ServiceSpec{
		Selector: sel, Ports: []corev1.ServicePort{{Name: "web", Port: 80, TargetPort: intstr.FromString("http")}},
	}}
	if err := c.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	testwait.Check(t, 10*time.Second, func() error {
		r, err := getRoute(ctx, c, ebbNames, ns, "db")
		if err != nil {
			return err
		}
		if r.Spec.Service.Name != "db" {
			return fmt.Errorf("spec.service %q, want the ClusterIP Service db", r.Spec.Service.Name)
		}
		return wantCondition(ctx, c, ns, "db", routingv1alpha1.ConditionSidecarReachable, metav1.ConditionTrue, "TargetsSidecar")
	})
}

// TestOldestClaimantAcrossKinds: a Deployment and a StatefulSet claiming
// one app name: the older keeps the route, the younger is told which
// workload has it, and when the older goes the route passes on.
func TestOldestClaimantAcrossKinds(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	c, _ := newClient(t)
	ns := "kinds-oldest"
	makeNamespace(t, c, ns, map[string]string{"ebb.dev/inject": "enabled"})
	s := statefulSet(t, c, ns, "first", appTemplate(map[string]string{"ebb.dev/app": "same"}, nil))
	testwait.Check(t, 10*time.Second, func() error {
		_, err := getRoute(ctx, c, ebbNames, ns, "same")
		return err
	})
	time.Sleep(1100 * time.Millisecond) // creation timestamps have seconds
	d, _ := deploymentChain(t, c, ns, "second", appTemplate(map[string]string{"ebb.dev/app": "same"}, nil), 1)
	testwait.Check(t, 10*time.Second, func() error {
		return wantEventOn(ctx, c, ns, "Deployment", d.Name, "AppNameTaken", "routes statefulset/first")
	})
	if ref, _, err := routeTarget(ctx, c, ns, "same"); err != nil || ref.Kind != "StatefulSet" {
		t.Fatalf("route target %+v (%v), want the older StatefulSet", ref, err)
	}
	if err := c.Delete(ctx, s); err != nil {
		t.Fatal(err)
	}
	testwait.Check(t, 10*time.Second, func() error {
		ref, _, err := routeTarget(ctx, c, ns, "same")
		if err != nil {
			return err
		}
		if ref.Kind != "Deployment" || ref.Name != "second" {
			return fmt.Errorf("route target %+v, want Deployment second", ref)
		}
		return nil
	})
	testwait.Check(t, 10*time.Second, func() error {
		return wantEventOn(ctx, c, ns, "Deployment", d.Name, "AppRouteTakenOver", "routed statefulset/first")
	})
}

// TestWorkerCRDAppearsLater: ebb.dev lists workers.example.com, whose CRD
// is not installed when it starts; once the CRD is, a Worker labelled as an
// app gets its AppRoute, owned by it, naming its kind.
func TestWorkerCRDAppearsLater(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	c, _ := newClient(t)
	ns := "workers"
	makeNamespace(t, c, ns, map[string]string{"ebb.dev/inject": "enabled"})
	crd, err := workers.CRD()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, crd); err != nil {
		t.Fatalf("install the Worker CRD: %v", err)
	}
	testwait.Check(t, 20*time.Second, func() error {
		var got apiextensionsv1.CustomResourceDefinition
		if err := c.Get(ctx, client.ObjectKeyFromObject(crd), &got); err != nil {
			return err
		}
		for _, cond := range got.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("Worker CRD not established")
	})
	tmpl := appTemplate(map[string]string{"ebb.dev/app": "jobs", "app.kubernetes.io/name": "jobs"}, nil)
	w, err := workers.New(ns, "jobs", 0, tmpl)
	if err != nil {
		t.Fatal(err)
	}
	// The test client's REST mapper learns of the kind a moment after the
	// CRD is established.
	testwait.Check(t, 20*time.Second, func() error {
		err := c.Create(ctx, w.DeepCopy())
		if meta.IsNoMatchError(err) {
			return err
		}
		if err != nil {
			t.Fatalf("create Worker: %v", err)
		}
		return nil
	})
	if err := c.Get(ctx, client.ObjectKeyFromObject(w), w); err != nil {
		t.Fatal(err)
	}
	tr := true
	testwait.Check(t, 30*time.Second, func() error {
		ref, owners, err := routeTarget(ctx, c, ns, "jobs")
		if err != nil {
			return err
		}
		want := routingv1alpha1.ScaleTargetReference{APIVersion: "example.com/v1", Kind: "Worker", Name: "jobs"}
		wantOwners := []metav1.OwnerReference{{APIVersion: "example.com/v1", Kind: "Worker", Name: "jobs", UID: w.GetUID(), Controller: &tr}}
		if d := cmp.Diff(want, ref) + cmp.Diff(wantOwners, owners); d != "" {
			return fmt.Errorf("scaleTargetRef, owners (-want +got):\n%s", d)
		}
		return nil
	})
}
