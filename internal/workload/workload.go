package workload

import (
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Workload is what ebb reads of a workload, whatever its kind.
type Workload struct {
	GVK    schema.GroupVersionKind
	Object client.Object // the object read, for events and owner references
	// Template is the pod template; Selector selects its pods (the
	// template's labels when the kind has no spec.selector).
	Template corev1.PodTemplateSpec
	Selector *metav1.LabelSelector
	// Replicas is spec.replicas, nil when unset (the kind's default).
	Replicas *int32
}

// Namespace, Name, UID and Created are the object's.
func (w *Workload) Namespace() string    { return w.Object.GetNamespace() }
func (w *Workload) Name() string         { return w.Object.GetName() }
func (w *Workload) Created() metav1.Time { return w.Object.GetCreationTimestamp() }
func (w *Workload) OwnerRef() metav1.OwnerReference {
	t := true
	return metav1.OwnerReference{APIVersion: w.GVK.GroupVersion().String(), Kind: w.GVK.Kind, Name: w.Object.GetName(), UID: w.Object.GetUID(), Controller: &t}
}

// Ref is kind/name as kubectl takes it: statefulset/web,
// worker.example.com/w.
func (w *Workload) Ref() string { return KubectlName(w.GVK.GroupKind(), w.Name()) }

// KubectlName is kind/name as kubectl takes it: deployment/web,
// statefulset/db, worker.example.com/w.
func KubectlName(gk schema.GroupKind, name string) string {
	if gk.Group == "apps" {
		gk.Group = ""
	}
	k := schema.GroupKind{Group: gk.Group, Kind: strings.ToLower(gk.Kind)}
	return k.String() + "/" + name
}

// Older orders workloads that claim one app name: the oldest first, then
// by kind and name, so two claimants never take the name in turns.
func Older(a, b *Workload) bool {
	ca, cb := a.Created(), b.Created()
	if !ca.Equal(&cb) {
		return ca.Before(&cb)
	}
	if a.GVK.Kind != b.GVK.Kind {
		return a.GVK.Kind < b.GVK.Kind
	}
	return a.Name() < b.Name()
}

// FromDeployment views d.
func FromDeployment(d *appsv1.Deployment) *Workload {
	return &Workload{GVK: Deployment, Object: d, Template: d.Spec.Template, Selector: d.Spec.Selector, Replicas: d.Spec.Replicas}
}

// FromStatefulSet views s.
func FromStatefulSet(s *appsv1.StatefulSet) *Workload {
	return &Workload{GVK: StatefulSet, Object: s, Template: s.Spec.Template, Selector: s.Spec.Selector, Replicas: s.Spec.Replicas}
}

// FromUnstructured views a PodSpecable custom resource. Its spec.template
// must decode as a PodTemplateSpec; spec.selector, if set, as a
// LabelSelector; spec.replicas, if set, be an integer.
func FromUnstructured(u *unstructured.Unstructured) (*Workload, error) {
	w := &Workload{GVK: u.GroupVersionKind(), Object: u}
	what := fmt.Sprintf("%s %s/%s", w.GVK.Kind, u.GetNamespace(), u.GetName())
	tmpl, ok, err := unstructured.NestedMap(u.Object, "spec", "template")
	if err != nil || !ok {
		return nil, fmt.Errorf("%s has no spec.template: ebb routes only PodSpecable kinds", what)
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(tmpl, &w.Template); err != nil {
		return nil, fmt.Errorf("%s: spec.template is no pod template: %w", what, err)
	}
	if sel, ok, _ := unstructured.NestedMap(u.Object, "spec", "selector"); ok {
		w.Selector = &metav1.LabelSelector{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(sel, w.Selector); err != nil {
			return nil, fmt.Errorf("%s: spec.selector is no label selector: %w", what, err)
		}
	} else if len(w.Template.Labels) > 0 {
		w.Selector = &metav1.LabelSelector{MatchLabels: w.Template.Labels}
	}
	r, ok, err := unstructured.NestedFieldNoCopy(u.Object, "spec", "replicas")
	if err != nil {
		return nil, fmt.Errorf("%s: spec.replicas: %w", what, err)
	}
	if ok {
		n, err := replicas(r)
		if err != nil {
			return nil, fmt.Errorf("%s: spec.replicas: %w", what, err)
		}
		w.Replicas = &n
	}
	return w, nil
}

// Replicas reads spec.replicas of an unstructured object (a JSON number):
// set is false when it is absent.
func Replicas(u *unstructured.Unstructured) (n int32, set bool, err error) {
	r, ok, err := unstructured.NestedFieldNoCopy(u.Object, "spec", "replicas")
	if err != nil || !ok {
		return 0, false, err
	}
	n, err = replicas(r)
	return n, err == nil, err
}

func replicas(v any) (int32, error) {
	switch v := v.(type) {
	case int64:
		return int32(v), nil
	case int32:
		return v, nil
	case int:
		return int32(v), nil
	case float64:
		if v == float64(int32(v)) {
			return int32(v), nil
		}
	}
	return 0, fmt.Errorf("%v is no integer", v)
}

// SlimUnstructured keeps of a custom workload what ebb reads: its
// metadata without managed fields and kubectl's last-applied copy, and
// spec.template, spec.selector and spec.replicas. A cache transform.
func SlimUnstructured(u *unstructured.Unstructured) *unstructured.Unstructured {
	u.SetManagedFields(nil)
	if a := u.GetAnnotations(); a != nil {
		if _, ok := a[corev1.LastAppliedConfigAnnotation]; ok {
			delete(a, corev1.LastAppliedConfigAnnotation)
			u.SetAnnotations(a)
		}
	}
	have, _ := u.Object["spec"].(map[string]any)
	spec := map[string]any{}
	for _, k := range []string{"template", "selector", "replicas"} {
		if v, ok := have[k]; ok {
			spec[k] = v
		}
	}
	u.Object["spec"] = spec
	delete(u.Object, "status")
	return u
}
