package webhook

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/internal/workload"
	"github.com/ebb-dev/ebb/webhook/inject"
)

// cacheOptions keep the manager's cache to what the controller reads: of
// pods only those labelled <suffix>/app (this instance's apps; the API
// server filters them), each stripped to what PodsInjected reads; of every
// object but AppRoutes no managed fields (the controller reads an
// AppRoute's own, to drop the labels its last apply set: appliedLabels);
// of KEDA's ScaledObjects only the spec fields ScaledByKEDA reads; of
// Ingresses and HTTPRoutes only their hosts, paths and backends; of
// ConfigMaps only their metadata without annotations (the controllers
// watch them so, and read a placeholder's page from the API server: see
// policies).
// Of the objects of the --scale-targets kinds (targets), only what the
// controller reads of a workload (workload.SlimUnstructured).
// Every informer's watch errors go to apis (optionalAPIs.watchError).
func cacheOptions(names groupsuffix.Names, apis optionalAPIs, targets []schema.GroupResource) (cache.Options, error) {
	app, err := labels.NewRequirement(names.AppLabel(), selection.Exists, nil)
	if err != nil {
		return cache.Options{}, err
	}
	return cache.Options{
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}: {Label: labels.NewSelector().Add(*app), Transform: podTransform},
		},
		DefaultTransform: func(o any) (any, error) {
			if u, ok := o.(*unstructured.Unstructured); ok && slices.ContainsFunc(targets, func(gr schema.GroupResource) bool { return gr.Group == u.GroupVersionKind().Group }) {
				return workload.SlimUnstructured(u), nil
			}
			return stripTransform(o)
		},
		DefaultWatchErrorHandler: apis.watchError,
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

// stripTransform drops the managed fields and kubectl's
// last-applied-configuration of every cached object but AppRoutes, every
// annotation of the metadata-only ConfigMaps, of KEDA's ScaledObjects all but the spec's scale target and
// triggers (KEDA keeps much in their status), and of Ingresses and
// HTTPRoutes all but what their hosts, paths and backends are
// (ingressTransform, httpRouteTransform).
func stripTransform(o any) (any, error) {
	switch o := o.(type) {
	case *routingv1alpha1.AppRoute:
		return o, nil
	case *networkingv1.Ingress:
		return ingressTransform(o), nil
	case *gatewayv1.HTTPRoute:
		return httpRouteTransform(o), nil
	case *metav1.PartialObjectMetadata:
		// ConfigMaps, watched as metadata: the controllers read their
		// name, namespace and resourceVersion only.
		o.SetManagedFields(nil)
		o.SetAnnotations(nil)
		return o, nil
	case *unstructured.Unstructured:
		o.SetManagedFields(nil)
		dropLastApplied(o)
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
		dropLastApplied(o)
		return o, nil
	}
	return o, nil // a tombstone (cache.DeletedFinalStateUnknown)
}

// dropLastApplied drops kubectl's last-applied-configuration annotation,
// a copy of the whole object as last applied, which nothing reads here.
func dropLastApplied(o client.Object) {
	a := o.GetAnnotations()
	if _, ok := a[corev1.LastAppliedConfigAnnotation]; !ok {
		return
	}
	delete(a, corev1.LastAppliedConfigAnnotation)
	if len(a) == 0 {
		a = nil
	}
	o.SetAnnotations(a)
}

// slimMeta keeps of an object's metadata what the cache and the
// controller's predicates read: name, namespace, UID, resourceVersion,
// generation and deletion timestamp.
func slimMeta(m *metav1.ObjectMeta) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion,
		Generation: m.Generation, DeletionTimestamp: m.DeletionTimestamp}
}

// ingressTransform keeps of an Ingress what ingressClaims reads: its
// rules' hosts, paths and Service backends, and its default backend's
// Service. Labels, annotations (some controllers keep whole
// configurations there), TLS and status go.
func ingressTransform(ing *networkingv1.Ingress) *networkingv1.Ingress {
	slim := &networkingv1.Ingress{ObjectMeta: slimMeta(&ing.ObjectMeta)}
	backend := func(b *networkingv1.IngressBackend) networkingv1.IngressBackend {
		return networkingv1.IngressBackend{Service: b.Service}
	}
	if b := ing.Spec.DefaultBackend; b != nil && b.Service != nil {
		slim.Spec.DefaultBackend = &networkingv1.IngressBackend{Service: b.Service}
	}
	for _, rule := range ing.Spec.Rules {
		r := networkingv1.IngressRule{Host: rule.Host}
		if rule.HTTP != nil {
			r.HTTP = &networkingv1.HTTPIngressRuleValue{}
			for _, p := range rule.HTTP.Paths {
				if p.Backend.Service != nil {
					r.HTTP.Paths = append(r.HTTP.Paths, networkingv1.HTTPIngressPath{Path: p.Path, PathType: p.PathType, Backend: backend(&p.Backend)})
				}
			}
		}
		slim.Spec.Rules = append(slim.Spec.Rules, r)
	}
	return slim
}

// httpRouteTransform keeps of an HTTPRoute what httpRouteClaims reads: its
// hostnames, each rule's path matches and backendRefs (without filters).
// Parent references, filters, header and query matches, labels,
// annotations and the status (one entry per Gateway) go.
func httpRouteTransform(hr *gatewayv1.HTTPRoute) *gatewayv1.HTTPRoute {
	slim := &gatewayv1.HTTPRoute{ObjectMeta: slimMeta(&hr.ObjectMeta)}
	slim.Spec.Hostnames = hr.Spec.Hostnames
	for _, rule := range hr.Spec.Rules {
		var r gatewayv1.HTTPRouteRule
		for _, m := range rule.Matches {
			r.Matches = append(r.Matches, gatewayv1.HTTPRouteMatch{Path: m.Path})
		}
		for _, ref := range rule.BackendRefs {
			r.BackendRefs = append(r.BackendRefs, gatewayv1.HTTPBackendRef{BackendRef: ref.BackendRef})
		}
		slim.Spec.Rules = append(slim.Spec.Rules, r)
	}
	return slim
}
