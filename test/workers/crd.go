package workers

import (
	_ "embed"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"
)

//go:embed crd.yaml
var crdYAML []byte

// The Worker kind's names, for tests that build or watch Workers.
var (
	GroupVersion = schema.GroupVersion{Group: "example.com", Version: "v1"}
	GVK          = GroupVersion.WithKind("Worker")
	GVR          = GroupVersion.WithResource("workers")
)

// ScaleTarget is the Worker kind as the --scale-targets flag names it.
const ScaleTarget = "workers.example.com"

// CRD returns a fresh copy of the Worker CustomResourceDefinition, so callers
// may change it (a test installing it under another name, say).
func CRD() (*apiextensionsv1.CustomResourceDefinition, error) {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(crdYAML, crd); err != nil {
		return nil, fmt.Errorf("decode the embedded Worker CRD: %w", err)
	}
	return crd, nil
}

// CRDYAML returns the CRD as written, for tests that apply manifests.
func CRDYAML() []byte { return append([]byte(nil), crdYAML...) }

// New builds a Worker with the given replicas and pod template; its selector
// is the template's labels, as a Deployment's usually is.
func New(namespace, name string, replicas int32, template corev1.PodTemplateSpec) (*unstructured.Unstructured, error) {
	tmpl, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&template)
	if err != nil {
		return nil, fmt.Errorf("convert the pod template of Worker %s/%s: %w", namespace, name, err)
	}
	sel, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&metav1.LabelSelector{MatchLabels: template.Labels})
	if err != nil {
		return nil, fmt.Errorf("convert the selector of Worker %s/%s: %w", namespace, name, err)
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{
			"replicas": int64(replicas),
			"selector": sel,
			"template": tmpl,
		},
	}}
	u.SetGroupVersionKind(GVK)
	u.SetNamespace(namespace)
	u.SetName(name)
	return u, nil
}
