package webhook

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/webhook/inject"
)

// cacheOptions keep the manager's cache to what the controller reads: of
// pods only those labelled <suffix>/app (this instance's apps; the API
// server filters them), each stripped to what PodsInjected reads; of every
// object but AppRoutes no managed fields (the controller reads an
// AppRoute's own, to drop the labels its last apply set: appliedLabels);
// of KEDA's ScaledObjects only the spec fields ScaledByKEDA reads.
func cacheOptions(names groupsuffix.Names) (cache.Options, error) {
	app, err := labels.NewRequirement(names.AppLabel(), selection.Exists, nil)
	if err != nil {
		return cache.Options{}, err
	}
	return cache.Options{
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}: {Label: labels.NewSelector().Add(*app), Transform: podTransform},
		},
		DefaultTransform: stripTransform,
	}, nil
}

// podTransform keeps of a pod what podsInjected and podInjectionChanged
// read: its name, labels (the Deployment's selector), deletion timestamp,
// phase, and whether it runs the sidecar (inject.HasSidecar: the sidecar
// container, by name only, stands for all).
func podTransform(o any) (any, error) {
	p, ok := o.(*corev1.Pod)
	if !ok {
		return o, nil
	}
	slim := &corev1.Pod{}
	slim.Name, slim.Namespace, slim.UID, slim.ResourceVersion = p.Name, p.Namespace, p.UID, p.ResourceVersion
	slim.Labels, slim.DeletionTimestamp = p.Labels, p.DeletionTimestamp
	slim.Status.Phase = p.Status.Phase
	if inject.HasSidecar(&p.Spec) {
		// The sidecar alone stands for the containers.
		slim.Spec.InitContainers = []corev1.Container{{Name: inject.ContainerName}}
	}
	return slim, nil
}

// stripTransform drops the managed fields of every cached object but
// AppRoutes, and of KEDA's ScaledObjects all but the spec's scale target
// and triggers (KEDA keeps much in their status).
func stripTransform(o any) (any, error) {
	switch o := o.(type) {
	case *routingv1alpha1.AppRoute:
		return o, nil
	case *unstructured.Unstructured:
		o.SetManagedFields(nil)
		if o.GroupVersionKind() == scaledObjectKind {
			have, _ := o.Object["spec"].(map[string]any)
			spec := map[string]any{}
			for _, k := range []string{"scaleTargetRef", "triggers"} {
				if v, ok := have[k]; ok {
					spec[k] = v
				}
			}
			o.Object["spec"] = spec
			delete(o.Object, "status")
		}
		return o, nil
	case client.Object:
		o.SetManagedFields(nil)
		return o, nil
	}
	return o, nil // a tombstone (cache.DeletedFinalStateUnknown)
}
