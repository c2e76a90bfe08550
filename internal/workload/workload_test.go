package workload

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
)

func TestParseTargets(t *testing.T) {
	got, err := ParseTargets(" rollouts.argoproj.io, workers.example.com,")
	if err != nil {
		t.Fatal(err)
	}
	want := []schema.GroupResource{{Group: "argoproj.io", Resource: "rollouts"}, {Group: "example.com", Resource: "workers"}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got)\n%s", d)
	}
	for _, tc := range []struct{ in, says string }{
		{"rollouts", "names no API group"},
		{"statefulsets.apps", "always routed"},
		{"jobs.batch", "built-in"},
		{"Rollouts.argoproj.io", "plural lower-case"},
		{"workers.example.com,workers.example.com", "listed twice"},
		{"workers.exa_mple.com", "no API group name"},
	} {
		_, err := ParseTargets(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%q: %v, want it to say %q", tc.in, err, tc.says)
		}
	}
	// Every problem at once.
	_, err = ParseTargets("rollouts,deployments.apps")
	if err == nil || !strings.Contains(err.Error(), "rollouts") || !strings.Contains(err.Error(), "deployments.apps") {
		t.Errorf("both problems: %v", err)
	}
}

func TestResolve(t *testing.T) {
	gv := schema.GroupVersion{Group: "example.com", Version: "v1"}
	m := meta.NewDefaultRESTMapper([]schema.GroupVersion{gv})
	m.Add(gv.WithKind("Worker"), meta.RESTScopeNamespace)
	k, err := Resolve(m, schema.GroupResource{Group: "example.com", Resource: "workers"})
	if err != nil {
		t.Fatal(err)
	}
	if k.GVK != gv.WithKind("Worker") || k.GVR != gv.WithResource("workers") {
		t.Errorf("%+v", k)
	}
	_, err = Resolve(m, schema.GroupResource{Group: "argoproj.io", Resource: "rollouts"})
	if !meta.IsNoMatchError(err) {
		t.Errorf("a kind not served: %v, want a no-match error", err)
	}
}

func template() corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "w"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "img", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}}}}
}

func worker(spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetAPIVersion("example.com/v1")
	u.SetKind("Worker")
	u.SetNamespace("ns")
	u.SetName("w")
	return u
}

func TestFromUnstructured(t *testing.T) {
	tmpl := map[string]any{
		"metadata": map[string]any{"labels": map[string]any{"app": "w"}},
		"spec":     map[string]any{"containers": []any{map[string]any{"name": "app", "image": "img", "ports": []any{map[string]any{"name": "http", "containerPort": int64(8080)}}}}},
	}
	w, err := FromUnstructured(worker(map[string]any{"replicas": int64(3), "template": tmpl,
		"selector": map[string]any{"matchLabels": map[string]any{"app": "w", "tier": "x"}}}))
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(template(), w.Template); d != "" {
		t.Errorf("template (-want +got)\n%s", d)
	}
	if d := cmp.Diff(&metav1.LabelSelector{MatchLabels: map[string]string{"app": "w", "tier": "x"}}, w.Selector); d != "" {
		t.Errorf("selector (-want +got)\n%s", d)
	}
	if w.Replicas == nil || *w.Replicas != 3 {
		t.Errorf("replicas %v", w.Replicas)
	}
	if w.Ref() != "worker.example.com/w" || w.OwnerRef().APIVersion != "example.com/v1" || w.OwnerRef().Kind != "Worker" {
		t.Errorf("ref %s, owner %+v", w.Ref(), w.OwnerRef())
	}

	// No selector: the template's labels; no replicas: nil.
	w, err = FromUnstructured(worker(map[string]any{"template": tmpl}))
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(&metav1.LabelSelector{MatchLabels: map[string]string{"app": "w"}}, w.Selector); d != "" || w.Replicas != nil {
		t.Errorf("selector (-want +got)\n%s; replicas %v", d, w.Replicas)
	}

	for _, bad := range []map[string]any{
		{},
		{"template": "x"},
		{"template": tmpl, "replicas": "two"},
		{"template": tmpl, "selector": map[string]any{"matchLabels": "x"}},
	} {
		if _, err := FromUnstructured(worker(bad)); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}

func TestKubectlNameAndOlder(t *testing.T) {
	d := FromDeployment(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", CreationTimestamp: metav1.Unix(10, 0)}})
	s := FromStatefulSet(&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "web", CreationTimestamp: metav1.Unix(5, 0)},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](0)}})
	if d.Ref() != "deployment/web" || s.Ref() != "statefulset/web" {
		t.Errorf("%s %s", d.Ref(), s.Ref())
	}
	if !Older(s, d) || Older(d, s) {
		t.Error("the StatefulSet, created first, is older")
	}
	s.Object.SetCreationTimestamp(metav1.Unix(10, 0))
	if !Older(d, s) {
		t.Error("same age: Deployment before StatefulSet by kind")
	}
}

func TestSlimUnstructured(t *testing.T) {
	u := worker(map[string]any{"template": map[string]any{}, "replicas": int64(1), "big": "x"})
	u.SetAnnotations(map[string]string{corev1.LastAppliedConfigAnnotation: "{}", "keep": "y"})
	u.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: "m"}})
	u.Object["status"] = map[string]any{"replicas": int64(1)}
	SlimUnstructured(u)
	want := map[string]any{"template": map[string]any{}, "replicas": int64(1)}
	if d := cmp.Diff(want, u.Object["spec"]); d != "" || u.Object["status"] != nil || len(u.GetManagedFields()) > 0 || u.GetAnnotations()["keep"] != "y" || len(u.GetAnnotations()) != 1 {
		t.Errorf("spec (-want +got)\n%s; %v", d, u.Object)
	}
}
