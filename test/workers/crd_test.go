package workers

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestCRDHasScaleSubresource holds the embedded CRD to what ebb needs of a
// custom kind: the scale subresource at the paths the issue fixed, and a
// schema that keeps the pod template (pruning would empty it).
func TestCRDHasScaleSubresource(t *testing.T) {
	crd, err := CRD()
	if err != nil {
		t.Fatal(err)
	}
	if crd.Name != "workers.example.com" || crd.Spec.Group != GVK.Group || crd.Spec.Names.Kind != GVK.Kind || crd.Spec.Names.Plural != GVR.Resource {
		t.Fatalf("names: %s %s %s %s", crd.Name, crd.Spec.Group, crd.Spec.Names.Kind, crd.Spec.Names.Plural)
	}
	v := crd.Spec.Versions[0]
	if v.Name != GVK.Version || v.Subresources == nil || v.Subresources.Status == nil || v.Subresources.Scale == nil {
		t.Fatalf("version %s lacks status or scale subresource", v.Name)
	}
	s := v.Subresources.Scale
	if s.SpecReplicasPath != ".spec.replicas" || s.StatusReplicasPath != ".status.replicas" || s.LabelSelectorPath == nil || *s.LabelSelectorPath != ".status.selector" {
		t.Fatalf("scale paths: %+v", s)
	}
	tmpl := v.Schema.OpenAPIV3Schema.Properties["spec"].Properties["template"]
	if tmpl.XPreserveUnknownFields == nil || !*tmpl.XPreserveUnknownFields {
		t.Fatal("spec.template would be pruned")
	}
}

func TestNew(t *testing.T) {
	tmpl := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "w"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "x"}}}}
	u, err := New("ns", "w", 2, tmpl)
	if err != nil {
		t.Fatal(err)
	}
	if r, _, _ := unstructured.NestedInt64(u.Object, "spec", "replicas"); r != 2 {
		t.Errorf("replicas %d", r)
	}
	if l, _, _ := unstructured.NestedString(u.Object, "spec", "selector", "matchLabels", "app"); l != "w" {
		t.Errorf("selector %q", l)
	}
	if img, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers"); len(img) != 1 {
		t.Errorf("containers %v", img)
	}
	if u.GetAPIVersion() != "example.com/v1" || u.GetKind() != "Worker" {
		t.Errorf("gvk %s", u.GroupVersionKind())
	}
}
