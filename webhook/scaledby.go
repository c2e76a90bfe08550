package webhook

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
)

// scaledObjectList is KEDA's ScaledObject list, read without KEDA's types.
var scaledObjectList = schema.GroupVersionKind{Group: "keda.sh", Version: "v1alpha1", Kind: "ScaledObjectList"}

// rescaledBy is how often a route's ScaledByKEDA is looked at again when
// nothing else brings its reconcile: the controller watches no
// ScaledObject (KEDA may not be installed, and a watch on a missing API
// stops the controller), so a ScaledObject created or removed shows
// within this time.
const rescaledBy = time.Minute

// scaledBy is the ScaledByKEDA condition of route: whether a ScaledObject
// of its namespace has an external-push (or external) trigger whose app is
// the route's, and scales the route's Deployment. It lists the namespace's
// ScaledObjects from the API server (uncached: there are few, and the
// cache would need KEDA's API at start).
func (r *routeReconciler) scaledBy(ctx context.Context, route *routingv1alpha1.AppRoute) metav1.Condition {
	cond := metav1.Condition{Type: routingv1alpha1.ConditionScaledByKEDA, ObservedGeneration: route.Generation}
	var list unstructured.UnstructuredList
	list.SetGroupVersionKind(scaledObjectList)
	if err := r.routes.reader.List(ctx, &list, client.InNamespace(route.Namespace)); err != nil {
		cond.Status, cond.Reason = metav1.ConditionUnknown, "CannotListScaledObjects"
		cond.Message = fmt.Sprintf("cannot list KEDA ScaledObjects: %v", err)
		if meta.IsNoMatchError(err) {
			cond.Reason, cond.Message = "KEDANotInstalled", "KEDA's ScaledObject API is not installed: nothing scales this app, nor wakes it from zero"
		}
		return cond
	}
	target := route.Spec.ScaleTargetRef.Name
	var elsewhere []string
	for _, so := range list.Items {
		triggers, _, _ := unstructured.NestedSlice(so.Object, "spec", "triggers")
		for _, t := range triggers {
			t, _ := t.(map[string]any)
			typ, _ := t["type"].(string)
			app, _, _ := unstructured.NestedString(t, "metadata", "app")
			if (typ != "external-push" && typ != "external") || app != route.Name {
				continue
			}
			scales, _, _ := unstructured.NestedString(so.Object, "spec", "scaleTargetRef", "name")
			if scales != target {
				elsewhere = append(elsewhere, fmt.Sprintf("%s (scales %s)", so.GetName(), scales))
				continue
			}
			addr, _, _ := unstructured.NestedString(t, "metadata", "scalerAddress")
			cond.Status, cond.Reason = metav1.ConditionTrue, "ScaledObjectFound"
			cond.Message = fmt.Sprintf("ScaledObject %s scales Deployment %s on this app's counts (scalerAddress %s)", so.GetName(), target, addr)
			return cond
		}
	}
	cond.Status, cond.Reason = metav1.ConditionFalse, "NoScaledObject"
	cond.Message = fmt.Sprintf("no KEDA ScaledObject in %s scales Deployment %s with an external-push trigger whose app is %q: nothing wakes this app from zero; create one (docs/configuration.md: Scale it with KEDA)",
		route.Namespace, target, route.Name)
	if len(elsewhere) > 0 {
		cond.Message += "; ScaledObjects naming this app but scaling another workload: " + strings.Join(elsewhere, ", ")
	}
	return cond
}
