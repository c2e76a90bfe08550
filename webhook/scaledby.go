package webhook

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
)

// scaledObjectKind is KEDA's ScaledObject, read without KEDA's types.
var scaledObjectKind = schema.GroupVersionKind{Group: "keda.sh", Version: "v1alpha1", Kind: "ScaledObject"}

// kedaCheckInterval is how often an instance whose API server had no
// ScaledObject API when it started looks for it again: one discovery
// request for the whole replica, whatever the number of apps. Once the
// API is there, ScaledObjects come from a watch.
var kedaCheckInterval = time.Minute

// keda is the controller's view of KEDA's ScaledObjects: a watch through
// the manager's cache once the API exists (a watch on a missing API would
// keep the controller from starting), until then the KEDANotInstalled
// condition and a look for the API every kedaCheckInterval. The look runs
// in every replica, elected or not, so a replica that wins the Lease
// already knows whether KEDA is installed: its first reconciles do not
// write KEDANotInstalled to every route, to write it back a minute later.
type keda struct {
	installed atomic.Bool
	mapper    meta.RESTMapper
	// watch starts the ScaledObject watch on the controller. Before the
	// controller starts (a replica not elected), controller-runtime keeps
	// the source and starts it with the controller.
	watch func() error
	// elected is closed once this replica leads (the manager's Elected):
	// the controller has started and reconciled its routes.
	elected <-chan struct{}
	// resync brings a reconcile of every route, when the API appears
	// after the controller started.
	resync chan event.GenericEvent
	routes client.Reader
	log    logr.Logger
}

var _ manager.LeaderElectionRunnable = (*keda)(nil)

// NeedLeaderElection is false: every replica looks for KEDA's API (see keda).
func (k *keda) NeedLeaderElection() bool { return false }

// present asks the API server (its discovery, through the manager's
// RESTMapper) whether the ScaledObject API is installed.
func (k *keda) present() (bool, error) {
	_, err := k.mapper.RESTMapping(scaledObjectKind.GroupKind(), scaledObjectKind.Version)
	switch {
	case err == nil:
		return true, nil
	case meta.IsNoMatchError(err):
		return false, nil
	default:
		return false, err
	}
}

// start starts the ScaledObject watch.
func (k *keda) start() error {
	if err := k.watch(); err != nil {
		return fmt.Errorf("watch KEDA ScaledObjects: %w", err)
	}
	k.installed.Store(true)
	return nil
}

// Start (a manager runnable, in every replica) looks for KEDA's API at
// once, then every kedaCheckInterval until it appears; then it starts the
// watch and, if this replica leads (its controller has reconciled every
// route, whose ScaledByKEDA said KEDANotInstalled), reconciles every
// route. A replica not elected yet needs no such pass: its controller
// reconciles every Deployment when it starts, KEDA's API known by then.
func (k *keda) Start(ctx context.Context) error {
	t := time.NewTicker(kedaCheckInterval)
	defer t.Stop()
	for {
		ok, err := k.present()
		if err != nil {
			k.log.V(1).Info("cannot look for KEDA's ScaledObject API; looking again at the next interval", "error", err.Error())
		}
		if ok {
			break
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
	if err := k.start(); err != nil {
		return err
	}
	k.log.Info("KEDA's ScaledObject API is installed: watching ScaledObjects")
	select {
	case <-k.elected:
	default:
		return nil // installed is read by the controller's first reconciles
	}
	var list routingv1alpha1.AppRouteList
	if err := k.routes.List(ctx, &list); err != nil {
		return fmt.Errorf("list AppRoutes: %w", err)
	}
	for i := range list.Items {
		r := &list.Items[i]
		req, ok := targetRequest(r)
		if !ok {
			continue
		}
		select {
		case k.resync <- resyncEvent(req):
		case <-ctx.Done():
			return nil
		}
	}
	return nil
}

// watchScaledObjects sets r.keda up on ctl: the ScaledObject watch at
// once if KEDA's API is installed, else the runnable that waits for it.
// A discovery error counts as absent: the runnable looks again.
func (r *routeReconciler) watchScaledObjects(mgr ctrl.Manager, ctl controller.Controller) error {
	so := &unstructured.Unstructured{}
	so.SetGroupVersionKind(scaledObjectKind)
	r.keda.mapper, r.keda.routes, r.keda.elected, r.keda.log = mgr.GetRESTMapper(), mgr.GetClient(), mgr.Elected(), r.log
	// A change reconciles the routes of the apps its triggers name, before
	// and after (EnqueueRequestsFromMapFunc maps both objects of an
	// update). Only spec changes count: KEDA writes the status often.
	r.keda.watch = func() error {
		return ctl.Watch(source.Kind[client.Object](mgr.GetCache(), so, handler.EnqueueRequestsFromMapFunc(r.routesNamedBy), predicate.GenerationChangedPredicate{}))
	}
	ok, err := r.keda.present()
	if ok {
		return r.keda.start()
	}
	if err != nil {
		r.log.Info("cannot look for KEDA's ScaledObject API; taking it as not installed and looking again every interval", "interval", kedaCheckInterval, "error", err.Error())
	} else {
		r.log.Info("KEDA's ScaledObject API is not installed; looking for it again every interval", "interval", kedaCheckInterval)
	}
	return mgr.Add(&r.keda)
}

// routesNamedBy maps a ScaledObject to the Deployments of the AppRoutes of
// its namespace whose app one of its triggers names.
func (r *routeReconciler) routesNamedBy(ctx context.Context, o client.Object) []reconcile.Request {
	u, ok := o.(*unstructured.Unstructured)
	if !ok {
		return nil
	}
	var reqs []reconcile.Request
	for _, app := range triggerApps(u) {
		var route routingv1alpha1.AppRoute
		if err := r.routes.client.Get(ctx, types.NamespacedName{Namespace: u.GetNamespace(), Name: app}, &route, client.UnsafeDisableDeepCopy); err != nil {
			continue // no route (yet): its own reconcile reads the ScaledObjects
		}
		if req, ok := targetRequest(&route); ok {
			reqs = append(reqs, req)
		}
	}
	return reqs
}

// triggerApps are the apps named by so's external-push and external
// triggers.
func triggerApps(so *unstructured.Unstructured) []string {
	var apps []string
	triggers, _, _ := unstructured.NestedSlice(so.Object, "spec", "triggers")
	for _, t := range triggers {
		t, _ := t.(map[string]any)
		typ, _ := t["type"].(string)
		app, _, _ := unstructured.NestedString(t, "metadata", "app")
		if (typ == "external-push" || typ == "external") && app != "" {
			apps = append(apps, app)
		}
	}
	return apps
}

// scaledBy is the ScaledByKEDA condition of route: whether a ScaledObject
// of its namespace has an external-push (or external) trigger whose app is
// the route's, and scales the route's Deployment. The ScaledObjects come
// from the manager's cache (the watch above).
func (r *routeReconciler) scaledBy(ctx context.Context, route *routingv1alpha1.AppRoute) metav1.Condition {
	cond := metav1.Condition{Type: routingv1alpha1.ConditionScaledByKEDA, ObservedGeneration: route.Generation}
	if !r.keda.installed.Load() {
		cond.Status, cond.Reason = metav1.ConditionUnknown, "KEDANotInstalled"
		cond.Message = "KEDA's ScaledObject API is not installed: nothing scales this app, nor wakes it from zero"
		return cond
	}
	var list unstructured.UnstructuredList
	list.SetGroupVersionKind(scaledObjectKind.GroupVersion().WithKind(scaledObjectKind.Kind + "List"))
	if err := r.routes.cache.List(ctx, &list, client.InNamespace(route.Namespace)); err != nil {
		cond.Status, cond.Reason = metav1.ConditionUnknown, "CannotListScaledObjects"
		cond.Message = fmt.Sprintf("cannot list KEDA ScaledObjects: %v", err)
		return cond
	}
	target := route.Spec.ScaleTargetRef.Name
	// KEDA's scaleTargetRef names a Deployment when it names no kind.
	kind := cmp.Or(route.Spec.ScaleTargetRef.Kind, "Deployment")
	ref := kind + " " + target
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
			scalesKind, _, _ := unstructured.NestedString(so.Object, "spec", "scaleTargetRef", "kind")
			if scales != target || cmp.Or(scalesKind, "Deployment") != kind {
				what := scales
				if cmp.Or(scalesKind, "Deployment") != kind {
					what = cmp.Or(scalesKind, "Deployment") + " " + scales
				}
				elsewhere = append(elsewhere, fmt.Sprintf("%s (scales %s)", so.GetName(), what))
				continue
			}
			addr, _, _ := unstructured.NestedString(t, "metadata", "scalerAddress")
			cond.Status, cond.Reason = metav1.ConditionTrue, "ScaledObjectFound"
			cond.Message = fmt.Sprintf("ScaledObject %s scales %s on this app's counts (scalerAddress %s)", so.GetName(), ref, addr)
			return cond
		}
	}
	cond.Status, cond.Reason = metav1.ConditionFalse, "NoScaledObject"
	cond.Message = fmt.Sprintf("no KEDA ScaledObject in %s scales %s with an external-push trigger whose app is %q: nothing wakes this app from zero; create one (docs/configuration.md: Scale it with KEDA)",
		route.Namespace, ref, route.Name)
	if len(elsewhere) > 0 {
		cond.Message += "; ScaledObjects naming this app but scaling another workload: " + strings.Join(elsewhere, ", ")
	}
	return cond
}
