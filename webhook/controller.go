package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/webhook/inject"
)

// The RBAC the webhook needs, generated into config/rbac.
//
// +kubebuilder:rbac:groups=routing.ebb.dev,resources=approutes,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=routing.ebb.dev,resources=approutes/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=apps,resources=deployments;replicasets,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=services;namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingwebhookconfigurations,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create;update,namespace=ebb-system
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete,namespace=ebb-system

// routeReconciler keeps every AppRoute the webhook registered in step with
// its Deployment's pod template, deletes it when the app opts out, and
// computes its status from the Service and its EndpointSlices. It never
// creates a route for a Deployment none of whose pods was admitted: the
// admission of the first pod does that, so only the instance that injected
// the sidecar routes the app.
type routeReconciler struct {
	routes   *routes
	recorder events.EventRecorder
	log      logr.Logger
}

func (r *routeReconciler) setup(mgr ctrl.Manager) error {
	names := r.routes.names
	byRoute := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		route, ok := o.(*routingv1alpha1.AppRoute)
		if !ok || route.Spec.ScaleTargetRef.Name == "" {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: route.Namespace, Name: route.Spec.ScaleTargetRef.Name}}}
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("approute_"+strings.NewReplacer(".", "_", "-", "_").Replace(names.Suffix())).
		For(&appsv1.Deployment{}).
		Watches(&routingv1alpha1.AppRoute{}, byRoute).
		Watches(&corev1.Service{}, handler.EnqueueRequestsFromMapFunc(r.routesInNamespace(func(*routingv1alpha1.AppRoute, client.Object) bool { return true }))).
		Watches(&discoveryv1.EndpointSlice{}, handler.EnqueueRequestsFromMapFunc(r.routesInNamespace(func(route *routingv1alpha1.AppRoute, o client.Object) bool {
			return route.Spec.Service.Name != "" && o.GetLabels()[discoveryv1.LabelServiceName] == route.Spec.Service.Name
		}))).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return r.enqueueRoutes(ctx, o.GetName(), nil, nil)
		})).
		Complete(r)
}

// routesInNamespace maps an object to the Deployments of the AppRoutes in
// its namespace that match.
func (r *routeReconciler) routesInNamespace(match func(*routingv1alpha1.AppRoute, client.Object) bool) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		return r.enqueueRoutes(ctx, o.GetNamespace(), o, match)
	}
}

func (r *routeReconciler) enqueueRoutes(ctx context.Context, ns string, o client.Object, match func(*routingv1alpha1.AppRoute, client.Object) bool) []reconcile.Request {
	var list routingv1alpha1.AppRouteList
	if err := r.routes.client.List(ctx, &list, client.InNamespace(ns)); err != nil {
		r.log.Error(err, "list AppRoutes", "namespace", ns)
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		route := &list.Items[i]
		if route.Spec.ScaleTargetRef.Name != "" && (match == nil || match(route, o)) {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: route.Spec.ScaleTargetRef.Name}})
		}
	}
	return reqs
}

// Reconcile handles one Deployment.
func (r *routeReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	names := r.routes.names
	c := r.routes.client
	var d appsv1.Deployment
	if err := c.Get(ctx, req.NamespacedName, &d); err != nil {
		// Gone: the garbage collector deletes its AppRoutes.
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	owned, err := r.ownedRoutes(ctx, &d)
	if err != nil || len(owned) == 0 {
		return reconcile.Result{}, err
	}
	var ns corev1.Namespace
	if err := c.Get(ctx, types.NamespacedName{Name: d.Namespace}, &ns); err != nil {
		return reconcile.Result{}, fmt.Errorf("get namespace %s: %w", d.Namespace, err)
	}
	if ns.Labels[names.InjectLabel()] != groupsuffix.InjectEnabled || d.Spec.Template.Labels[names.AppLabel()] == "" {
		return reconcile.Result{}, r.deleteRoutes(ctx, owned, "the app opted out")
	}

	want, app, svc, err := r.routes.desired(ctx, &d)
	var refusal *inject.RefusalError
	if errors.As(err, &refusal) {
		r.recorder.Eventf(&d, nil, corev1.EventTypeWarning, "InvalidAnnotations", "SyncAppRoute", "%s", refusal.Error())
		for i := range owned {
			st := owned[i].Status.DeepCopy()
			meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: routingv1alpha1.ConditionReady, Status: metav1.ConditionFalse,
				Reason: "InvalidAnnotations", Message: refusal.Error(), ObservedGeneration: owned[i].Generation})
			if err := r.applyStatus(ctx, &owned[i], st); err != nil {
				return reconcile.Result{}, err
			}
		}
		return reconcile.Result{}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	var stale []routingv1alpha1.AppRoute
	for _, o := range owned {
		if o.Name != want.Name {
			stale = append(stale, o)
		}
	}
	if err := r.deleteRoutes(ctx, stale, "the app was renamed"); err != nil {
		return reconcile.Result{}, err
	}
	if _, err := r.routes.apply(ctx, want); err != nil {
		return reconcile.Result{}, err
	}
	var current routingv1alpha1.AppRoute
	if err := c.Get(ctx, client.ObjectKeyFromObject(want), &current); err != nil {
		// Not in the cache yet: the watch on AppRoutes brings us back.
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	st, err := r.status(ctx, &current, app, svc)
	if err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{}, r.applyStatus(ctx, &current, st)
}

func (r *routeReconciler) ownedRoutes(ctx context.Context, d *appsv1.Deployment) ([]routingv1alpha1.AppRoute, error) {
	var list routingv1alpha1.AppRouteList
	if err := r.routes.client.List(ctx, &list, client.InNamespace(d.Namespace)); err != nil {
		return nil, fmt.Errorf("list AppRoutes in %s: %w", d.Namespace, err)
	}
	var owned []routingv1alpha1.AppRoute
	for _, route := range list.Items {
		for _, ref := range route.OwnerReferences {
			if ref.UID == d.UID {
				owned = append(owned, route)
				break
			}
		}
	}
	return owned, nil
}

func (r *routeReconciler) deleteRoutes(ctx context.Context, routes []routingv1alpha1.AppRoute, why string) error {
	for i := range routes {
		if err := r.routes.client.Delete(ctx, &routes[i]); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete AppRoute %s/%s (%s): %w", routes[i].Namespace, routes[i].Name, why, err)
		}
		r.log.Info("deleted AppRoute", "namespace", routes[i].Namespace, "name", routes[i].Name, "why", why)
	}
	return nil
}

// status computes the controller's part of the status: Ready and
// SidecarReachable, ready endpoints and whether the activator is in path.
// Propagated belongs to the activators and is left alone.
func (r *routeReconciler) status(ctx context.Context, route *routingv1alpha1.AppRoute, app inject.App, svc *corev1.Service) (*routingv1alpha1.AppRouteStatus, error) {
	st := route.Status.DeepCopy()
	st.ObservedGeneration = route.Generation
	st.ReadyEndpoints, st.ActivatorInPath = 0, false
	reachable := metav1.Condition{Type: routingv1alpha1.ConditionSidecarReachable, ObservedGeneration: route.Generation}
	ready := metav1.Condition{Type: routingv1alpha1.ConditionReady, ObservedGeneration: route.Generation}
	if svc == nil {
		reachable.Status, reachable.Reason = metav1.ConditionUnknown, "NoService"
		reachable.Message = "no Service in the namespace selects the app's pods"
		if app.Service != "" {
			reachable.Message = fmt.Sprintf("Service %s (annotation %s) not found", app.Service, r.routes.names.Key(inject.AnnotationService))
		}
	} else {
		rc := reach(svc, app, r.routes.cfg)
		reachable.Status, reachable.Reason, reachable.Message = metav1.ConditionFalse, rc.reason, rc.message
		if rc.ok {
			reachable.Status = metav1.ConditionTrue
		}
		var slices discoveryv1.EndpointSliceList
		if err := r.routes.client.List(ctx, &slices, client.InNamespace(route.Namespace), client.MatchingLabels{discoveryv1.LabelServiceName: svc.Name}); err != nil {
			return nil, fmt.Errorf("list EndpointSlices of Service %s/%s: %w", svc.Namespace, svc.Name, err)
		}
		for _, s := range slices.Items {
			if s.Labels[discoveryv1.LabelManagedBy] == r.routes.names.EndpointSliceManagedBy() {
				st.ActivatorInPath = true
				continue
			}
			for _, ep := range s.Endpoints {
				if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
					st.ReadyEndpoints++
				}
			}
		}
	}
	if reachable.Status == metav1.ConditionTrue {
		ready.Status, ready.Reason, ready.Message = metav1.ConditionTrue, "Routed", fmt.Sprintf("hosts route to Service %s through the sidecar", svc.Name)
	} else {
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, reachable.Reason, reachable.Message
	}
	meta.SetStatusCondition(&st.Conditions, reachable)
	meta.SetStatusCondition(&st.Conditions, ready)
	return st, nil
}

// applyStatus writes the controller's conditions and fields by server-side
// apply on the status subresource, unless nothing changed.
func (r *routeReconciler) applyStatus(ctx context.Context, route *routingv1alpha1.AppRoute, st *routingv1alpha1.AppRouteStatus) error {
	if equality.Semantic.DeepEqual(&route.Status, st) {
		return nil
	}
	var mine []metav1.Condition
	for _, c := range st.Conditions {
		if c.Type == routingv1alpha1.ConditionReady || c.Type == routingv1alpha1.ConditionSidecarReachable {
			mine = append(mine, c)
		}
	}
	body, err := json.Marshal(map[string]any{
		"apiVersion": routingv1alpha1.GroupVersion(r.routes.names.Group()).String(),
		"kind":       routingv1alpha1.Kind,
		"metadata":   map[string]any{"name": route.Name, "namespace": route.Namespace},
		"status": map[string]any{
			"observedGeneration": st.ObservedGeneration,
			"conditions":         mine,
			"readyEndpoints":     st.ReadyEndpoints,
			"activatorInPath":    st.ActivatorInPath,
		},
	})
	if err != nil {
		return fmt.Errorf("encode AppRoute %s/%s status: %w", route.Namespace, route.Name, err)
	}
	out := &routingv1alpha1.AppRoute{ObjectMeta: metav1.ObjectMeta{Name: route.Name, Namespace: route.Namespace}}
	err = r.routes.client.Status().Patch(ctx, out, client.RawPatch(types.ApplyPatchType, body), client.FieldOwner(FieldManager), client.ForceOwnership)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("apply AppRoute %s/%s status: %w", route.Namespace, route.Name, err)
	}
	return nil
}
