package webhook

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/internal/workload"
)

// workloadRequest is the route controller's request for workload gk/name:
// its name is workload.Key's, a Deployment's name alone (as before other
// kinds were routed), Kind.group/name for any other kind.
func workloadRequest(namespace string, gk schema.GroupKind, name string) reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: namespace, Name: workload.Key(gk, name)}}
}

// targetRequest is the request of the workload route.spec.scaleTargetRef
// names; false when it names none.
func targetRequest(route *routingv1alpha1.AppRoute) (reconcile.Request, bool) {
	ref := route.Spec.ScaleTargetRef
	if ref.Name == "" {
		return reconcile.Request{}, false
	}
	return workloadRequest(route.Namespace, targetKind(ref), ref.Name), true
}

// targetKind is the group and kind a scaleTargetRef names (an empty one:
// a Deployment, the CRD's default).
func targetKind(ref routingv1alpha1.ScaleTargetReference) schema.GroupKind {
	return workload.GroupKindOf(ref.APIVersion, ref.Kind)
}

// resyncEvent is a generic event that brings the reconcile of req.
func resyncEvent(req reconcile.Request) event.GenericEvent {
	o := &unstructured.Unstructured{}
	o.SetNamespace(req.Namespace)
	o.SetName(req.Name)
	return event.GenericEvent{Object: o}
}

// customKind is a kind listed in --scale-targets. Its CRD may be missing
// when the webhook starts, or come and go: api follows it as it follows
// the Gateway API's HTTPRoutes, and nothing reads objects of the kind
// while it is not served.
type customKind struct {
	gr  schema.GroupResource
	api *optionalAPI
	// gvk is set by the first look that finds the kind served, before
	// api.installed (read under api.read).
	gvk schema.GroupVersionKind
}

// newScaleTargetAPIs are the optional APIs of the listed kinds; their
// lookup (the RESTMapper's, through discovery) is filled by setup.
func newScaleTargetAPIs(targets []schema.GroupResource) []*customKind {
	out := make([]*customKind, len(targets))
	for i, gr := range targets {
		k := &customKind{gr: gr}
		k.api = &optionalAPI{poke: make(chan struct{}, 1), resource: gr.Resource, what: gr.String(),
			describes: func(d string) bool { return strings.HasPrefix(d, gr.Group+"/") }}
		out[i] = k
	}
	return out
}

// workloads reads the workloads of every kind the controller routes.
type workloads struct {
	names  groupsuffix.Names
	client client.Client // typed objects, from the manager's cache
	cache  client.Reader // the manager's cache, for custom kinds
	custom []*customKind
	log    logr.Logger
	// refused remembers the objects of custom kinds that are not
	// PodSpecable, logged once each (types.UID → struct{}).
	refused sync.Map
}

// kindOf is the listed custom kind gk, or nil.
func (w *workloads) kindOf(gk schema.GroupKind) *customKind {
	for _, k := range w.custom {
		if k.gr.Group == gk.Group && k.gvk.Kind == gk.Kind {
			return k
		}
	}
	return nil
}

// get is the workload req names, nil if it is gone, of a kind not
// routed, or not served.
func (w *workloads) get(ctx context.Context, req reconcile.Request) (*workload.Workload, error) {
	gk, name := workload.ParseKey(req.Name)
	key := types.NamespacedName{Namespace: req.Namespace, Name: name}
	switch gk {
	case workload.Deployment.GroupKind():
		var d appsv1.Deployment
		if err := w.client.Get(ctx, key, &d); err != nil {
			return nil, client.IgnoreNotFound(err)
		}
		return workload.FromDeployment(&d), nil
	case workload.StatefulSet.GroupKind():
		var s appsv1.StatefulSet
		if err := w.client.Get(ctx, key, &s); err != nil {
			return nil, client.IgnoreNotFound(err)
		}
		return workload.FromStatefulSet(&s), nil
	}
	var out *workload.Workload
	for _, k := range w.custom {
		if k.gr.Group != gk.Group {
			continue
		}
		err := k.api.read(ctx, func() error {
			if k.gvk.Kind != gk.Kind {
				return nil
			}
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(k.gvk)
			if err := w.cache.Get(ctx, key, u); err != nil {
				return client.IgnoreNotFound(err)
			}
			out = w.view(u)
			return nil
		})
		if err != nil || out != nil {
			return out, err
		}
	}
	return nil, nil
}

// view is the Workload of a custom object, nil (logged once) if it is
// not PodSpecable: ebb cannot route it.
func (w *workloads) view(u *unstructured.Unstructured) *workload.Workload {
	wl, err := workload.FromUnstructured(u)
	if err != nil {
		if _, seen := w.refused.LoadOrStore(u.GetUID(), struct{}{}); !seen {
			w.log.Info("not routing a workload of a --scale-targets kind", "error", err.Error())
		}
		return nil
	}
	return wl
}

// list is every workload of namespace ("": all) whose pod template has
// the app label, with value app when app is not "".
func (w *workloads) list(ctx context.Context, namespace, app string) ([]*workload.Workload, error) {
	label := w.names.AppLabel()
	opts := []client.ListOption{client.InNamespace(namespace), client.UnsafeDisableDeepCopy} // read only
	if app != "" {
		opts = append(opts, client.MatchingFields{appIndex: app})
	}
	var out []*workload.Workload
	var ds appsv1.DeploymentList
	if err := w.client.List(ctx, &ds, opts...); err != nil {
		return nil, fmt.Errorf("list Deployments in %q: %w", namespace, err)
	}
	for i := range ds.Items {
		if _, ok := ds.Items[i].Spec.Template.Labels[label]; ok {
			out = append(out, workload.FromDeployment(&ds.Items[i]))
		}
	}
	var ss appsv1.StatefulSetList
	if err := w.client.List(ctx, &ss, opts...); err != nil {
		return nil, fmt.Errorf("list StatefulSets in %q: %w", namespace, err)
	}
	for i := range ss.Items {
		if _, ok := ss.Items[i].Spec.Template.Labels[label]; ok {
			out = append(out, workload.FromStatefulSet(&ss.Items[i]))
		}
	}
	for _, k := range w.custom {
		err := k.api.read(ctx, func() error {
			var list unstructured.UnstructuredList
			list.SetGroupVersionKind(k.gvk.GroupVersion().WithKind(k.gvk.Kind + "List"))
			if err := w.cache.List(ctx, &list, client.InNamespace(namespace)); err != nil {
				return fmt.Errorf("list %s in %q: %w", k.gr, namespace, err)
			}
			for i := range list.Items {
				v, ok, _ := unstructured.NestedString(list.Items[i].Object, "spec", "template", "metadata", "labels", label)
				if !ok || app != "" && v != app {
					continue
				}
				if wl := w.view(&list.Items[i]); wl != nil {
					out = append(out, wl)
				}
			}
			return nil
		})
		switch {
		case errors.Is(err, errNotSynced):
			// Its informer is starting (its CRD has just come): the
			// kinds that are synced are listed without it. Its objects
			// come as the informer lists them, each bringing its own
			// reconcile, which may then claim its app. Failing here
			// would leave a map function (a namespace labelled for
			// injection) with nothing to enqueue and no retry.
			continue
		case err != nil:
			return nil, err
		}
	}
	return out, nil
}

// requests are the reconcile requests of wls, but except's.
func requests(wls []*workload.Workload, except string) []reconcile.Request {
	var reqs []reconcile.Request
	for _, wl := range wls {
		req := workloadRequest(wl.Namespace(), wl.GVK.GroupKind(), wl.Name())
		if req.Name != except {
			reqs = append(reqs, req)
		}
	}
	return reqs
}

// indexWorkloads indexes Deployments and StatefulSets by the value of
// their pod template's app label (appIndex).
func indexWorkloads(ctx context.Context, mgr ctrl.Manager, names groupsuffix.Names) error {
	for _, o := range []client.Object{&appsv1.Deployment{}, &appsv1.StatefulSet{}} {
		if err := mgr.GetFieldIndexer().IndexField(ctx, o, appIndex, func(o client.Object) []string {
			var labels map[string]string
			switch o := o.(type) {
			case *appsv1.Deployment:
				labels = o.Spec.Template.Labels
			case *appsv1.StatefulSet:
				labels = o.Spec.Template.Labels
			}
			if app, ok := labels[names.AppLabel()]; ok {
				return []string{app}
			}
			return nil
		}); err != nil {
			return fmt.Errorf("index %T by %s: %w", o, names.AppLabel(), err)
		}
	}
	return nil
}

// watchCustomKinds sets each listed kind's optional API up on ctl: its
// watch at once if the API server serves it, and the runnable that
// follows it coming and going. A change of a custom object's spec
// reconciles it, the others claiming its app name and the apps that need
// it (workloadChanged).
func (r *routeReconciler) watchCustomKinds(ctx context.Context, mgr ctrl.Manager, ctl controller.Controller) error {
	if len(r.workloads.custom) == 0 {
		return nil
	}
	dc, err := discovery.NewDiscoveryClientForConfig(mgr.GetConfig())
	if err != nil {
		return fmt.Errorf("discovery client: %w", err)
	}
	for _, k := range r.workloads.custom {
		g := k.api
		g.discovery, g.elected, g.resync, g.routes, g.log = dc, mgr.Elected(), r.keda.resync, mgr.GetClient(), r.log
		g.resolve = func() (string, error) {
			kd, err := workload.Resolve(mgr.GetRESTMapper(), k.gr)
			if meta.IsNoMatchError(err) {
				return "", nil
			}
			if err != nil {
				return "", err
			}
			k.gvk = kd.GVK
			return kd.GVR.GroupVersion().String(), nil
		}
		obj := func() *unstructured.Unstructured {
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(k.gvk)
			return u
		}
		g.watch = func() error {
			return ctl.Watch(source.Kind[client.Object](mgr.GetCache(), obj(), handler.EnqueueRequestsFromMapFunc(r.workloadChanged), predicate.GenerationChangedPredicate{}))
		}
		g.unwatch = func(ctx context.Context) error { return mgr.GetCache().RemoveInformer(ctx, obj()) }
		g.synced = func(ctx context.Context) bool {
			inf, err := mgr.GetCache().GetInformer(ctx, obj(), cache.BlockUntilSynced(false))
			return err == nil && inf.HasSynced()
		}
		if err := g.look(ctx); err != nil {
			return err
		}
		if !g.installed {
			r.log.Info("a --scale-targets kind is not served (its CRD is not installed); looking for it again every interval", "kind", k.gr.String(), "interval", gatewayCheckInterval)
		}
		if err := mgr.Add(g); err != nil {
			return fmt.Errorf("follow %s: %w", k.gr, err)
		}
	}
	return nil
}

// workloadChanged maps a workload whose spec changed (or that came or
// went) to the reconciles it brings: its own and its claimants'
// (workloadClaimants), and those of the apps that need its app, whose
// status.dependencies show its replicas (dependentsOfWorkload).
func (r *routeReconciler) workloadChanged(ctx context.Context, o client.Object) []reconcile.Request {
	return append(r.workloadClaimants(ctx, o), r.dependentsOfWorkload(ctx, o)...)
}

// templateLabels are a workload's group and kind and its pod template's
// labels, whatever its kind.
func templateLabels(o client.Object) (schema.GroupKind, map[string]string) {
	switch o := o.(type) {
	case *appsv1.Deployment:
		return workload.Deployment.GroupKind(), o.Spec.Template.Labels
	case *appsv1.StatefulSet:
		return workload.StatefulSet.GroupKind(), o.Spec.Template.Labels
	case *unstructured.Unstructured:
		labels, _, _ := unstructured.NestedStringMap(o.Object, "spec", "template", "metadata", "labels")
		return o.GroupVersionKind().GroupKind(), labels
	}
	return o.GetObjectKind().GroupVersionKind().GroupKind(), nil
}

// workloadClaimants maps a workload to itself and the other workloads of
// its namespace that claim its app name: this one may win or lose the
// AppRoute when it changes or goes.
func (r *routeReconciler) workloadClaimants(ctx context.Context, o client.Object) []reconcile.Request {
	gk, labels := templateLabels(o)
	self := workloadRequest(o.GetNamespace(), gk, o.GetName())
	app, ok := labels[r.routes.names.AppLabel()]
	if !ok {
		return []reconcile.Request{self} // it may have owned a route
	}
	return append(r.claimants(ctx, o.GetNamespace(), app, self.Name), self)
}
