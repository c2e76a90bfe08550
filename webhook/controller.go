package webhook

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/internal/routing"
	"github.com/ebb-dev/ebb/internal/workload"
	"github.com/ebb-dev/ebb/webhook/inject"
)

// The RBAC the webhook needs, generated into config/rbac. The controller
// watches Deployments and StatefulSets (their pod templates make the
// AppRoutes; the chart adds the --scale-targets kinds), Namespaces
// (their labels opt apps in), Services and EndpointSlices (status), the
// pods of this instance's apps (PodsInjected), MutatingWebhookConfigurations
// (whether another instance is installed), KEDA ScaledObjects
// (ScaledByKEDA), Ingresses and the Gateway API's HTTPRoutes (the
// hosts they route to an app's Service: spec.hostPaths), RoutePolicies
// (copied into their apps' routes; their status written) and ConfigMaps
// (their metadata watched; a placeholder's page read by a get), read
// only. The admission handler reads RoutePolicies from the cache.
//
// +kubebuilder:rbac:groups=routing.ebb.dev,resources=approutes,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=routing.ebb.dev,resources=approutes/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=routing.ebb.dev,resources=domainclaims,verbs=get;list;watch
// +kubebuilder:rbac:groups=routing.ebb.dev,resources=routepolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=routing.ebb.dev,resources=routepolicies/status,verbs=update;patch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch
// +kubebuilder:rbac:groups=apps,resources=deployments;statefulsets,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=services;namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=list;watch
// +kubebuilder:rbac:groups=keda.sh,resources=scaledobjects,verbs=list;watch
// +kubebuilder:rbac:groups=networking.k8s.io,resources=ingresses,verbs=get;list;watch
// +kubebuilder:rbac:groups=gateway.networking.k8s.io,resources=httproutes,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingwebhookconfigurations,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create;update,namespace=ebb-system
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete,namespace=ebb-system

// routeReconciler keeps one AppRoute per routed Deployment in step with its
// pod template, deletes it when the app opts out, and computes its status
// from the Service and its EndpointSlices. This instance routes a
// Deployment when its namespace is labelled <suffix>/inject=enabled, its pod
// template carries <suffix>/app, and no other installed ebb instance whose
// webhook the API server calls first also selects its pods (that instance
// injects the sidecar, so it routes the app): see injectors. It creates the
// AppRoute whatever the replica count, so a Deployment created at zero is
// routed before its first pod exists.
//
// It reads only its caches while nothing changes: every input of a route
// is watched (Deployments, Namespaces, AppRoutes, DomainClaims, Services,
// EndpointSlices, the instance's app pods, MutatingWebhookConfigurations,
// KEDA's ScaledObjects, Ingresses and HTTPRoutes, RoutePolicies and the
// metadata of ConfigMaps), and a route is applied
// or its status written
// only when what it would send differs from what the route has. Nothing
// requeues a route on a timer.
type routeReconciler struct {
	routes   *routes
	recorder events.EventRecorder
	log      logr.Logger
	keda     keda
	// workloads reads the workloads of every kind routed.
	workloads *workloads
	// skipped is, per AppRoute, what its last HostsSkipped event said
	// (types.NamespacedName → string): the event is sent when that
	// changes, not at each reconcile.
	skipped sync.Map
}

// appIndex indexes Deployments by the value of their pod template's
// <suffix>/app label.
const appIndex = "ebb.spec.template.metadata.labels.app"

// routeWorkers is how many Deployments the route controller reconciles at
// once.
const routeWorkers = 4

func newRouteReconciler(rts *routes, recorder events.EventRecorder, log logr.Logger) *routeReconciler {
	return &routeReconciler{routes: rts, recorder: recorder, log: log, keda: keda{resync: make(chan event.GenericEvent)},
		workloads: &workloads{names: rts.names, client: rts.client, cache: rts.cache, log: log}}
}

func (r *routeReconciler) setup(ctx context.Context, mgr ctrl.Manager) error {
	names := r.routes.names
	if r.routes.policies == nil {
		r.routes.policies = &policies{names: names, client: mgr.GetClient(), api: mgr.GetAPIReader()}
	}
	if err := r.routes.policies.index(ctx, mgr); err != nil {
		return err
	}
	if err := (&policyReconciler{policies: r.routes.policies, client: mgr.GetClient(), log: r.log.WithName("routepolicy")}).setup(mgr); err != nil {
		return fmt.Errorf("set up RoutePolicy controller: %w", err)
	}
	if err := indexWorkloads(ctx, mgr, names); err != nil {
		return err
	}
	// Deployment status changes (replica counts) do not change the route.
	specChanged := builder.WithPredicates(predicate.GenerationChangedPredicate{})
	ctl, err := ctrl.NewControllerManagedBy(mgr).
		Named("approute_"+strings.NewReplacer(".", "_", "-", "_").Replace(names.Suffix())).
		For(&appsv1.Deployment{}, specChanged).
		// Another workload claiming the same app name may win or lose the
		// AppRoute when this one changes or goes. StatefulSets come only
		// so (their requests name their kind: workloadRequest), and the
		// listed custom kinds once served (watchCustomKinds). The apps
		// that need its app come too: their status.dependencies show
		// whether it is scaled up (workloadChanged).
		Watches(&appsv1.Deployment{}, handler.EnqueueRequestsFromMapFunc(r.workloadChanged), specChanged).
		Watches(&appsv1.StatefulSet{}, handler.EnqueueRequestsFromMapFunc(r.workloadChanged), specChanged).
		Watches(&routingv1alpha1.AppRoute{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			route, ok := o.(*routingv1alpha1.AppRoute)
			if !ok {
				return nil
			}
			reqs := append(r.claimants(ctx, route.Namespace, route.Name, ""), r.sharingHosts(ctx, route)...)
			// Its Service may be another app's fallback (FallbackIsEbbApp).
			reqs = append(reqs, r.enqueueRoutes(ctx, route.Namespace, nil, func(other *routingv1alpha1.AppRoute, _ client.Object) bool {
				return other.Name != route.Name && meta.FindStatusCondition(other.Status.Conditions, routingv1alpha1.ConditionFallbackReady) != nil
			})...)
			if req, ok := targetRequest(route); ok {
				reqs = append(reqs, req)
			}
			return reqs
			// Only a route's spec (its hosts, paths, Service) or its coming
			// and going matter to this controller: the conditions other
			// programs write (Admitted, Propagated, Idle, lastColdStart)
			// would each bring a reconcile and a walk of every route.
		}), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// A deleted AppRoute's last HostsSkipped note goes with it.
		Watches(&routingv1alpha1.AppRoute{}, handler.Funcs{DeleteFunc: r.forgetSkipped}).
		// A DomainClaim decides which namespace serves its domain.
		Watches(&routingv1alpha1.DomainClaim{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return r.routesClaiming(ctx, nil, underDomain(o.GetName()))
		})).
		Watches(&corev1.Service{}, handler.EnqueueRequestsFromMapFunc(r.routesInNamespace(func(*routingv1alpha1.AppRoute, client.Object) bool { return true }))).
		Watches(&discoveryv1.EndpointSlice{}, handler.EnqueueRequestsFromMapFunc(r.routesInNamespace(func(route *routingv1alpha1.AppRoute, o client.Object) bool {
			return route.Spec.Service.Name != "" && o.GetLabels()[discoveryv1.LabelServiceName] == route.Spec.Service.Name
		}))).
		// An Ingress's hosts go to the routes of the Services its backends
		// name, before and after a change (the map sees both objects of an
		// update); its status (the load balancer's address) changes nothing.
		Watches(&networkingv1.Ingress{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			ing, ok := o.(*networkingv1.Ingress)
			if !ok {
				return nil
			}
			return r.routesOfServices(ctx, ing.Namespace, ingressServices(ing))
		}), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// An app's RoutePolicy, before and after a change, and the
		// ConfigMap of its placeholder (metadata only: the cache holds no
		// ConfigMap's data).
		Watches(&routingv1alpha1.RoutePolicy{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			pol, ok := o.(*routingv1alpha1.RoutePolicy)
			if !ok {
				return nil
			}
			return r.claimants(ctx, pol.Namespace, pol.Spec.App, "")
		}), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WatchesMetadata(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			var reqs []reconcile.Request
			for _, p := range r.routes.policies.naming(ctx, o, func(pol *routingv1alpha1.RoutePolicy) types.NamespacedName {
				return types.NamespacedName{Namespace: pol.Namespace, Name: pol.Spec.App}
			}) {
				reqs = append(reqs, r.claimants(ctx, p.Namespace, p.Name, "")...)
			}
			return reqs
		})).
		// What the apps that need an app show of it (status.dependencies):
		// its workload scaled (the workload watches above), its readiness,
		// its policy (wakes, wakeableFrom). An app nothing needs brings no
		// work.
		Watches(&routingv1alpha1.AppRoute{}, handler.EnqueueRequestsFromMapFunc(r.dependentsOfRoute), builder.WithPredicates(readinessChanged)).
		Watches(&routingv1alpha1.RoutePolicy{}, handler.EnqueueRequestsFromMapFunc(r.dependentsOfPolicy), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// Labelling a namespace routes its apps; unlabelling it, or
		// labelling it for another instance called first, removes them.
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return append(r.appsInNamespace(ctx, o.GetName()), r.enqueueRoutes(ctx, o.GetName(), nil, nil)...)
		}), builder.WithPredicates(predicate.LabelChangedPredicate{})).
		// A pod of an app that starts, stops, or runs with or without the
		// sidecar changes PodsInjected (the cache holds only the pods
		// labelled <suffix>/app, stripped: see podTransform).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			app, ok := o.GetLabels()[names.AppLabel()]
			if !ok {
				return nil
			}
			return r.claimants(ctx, o.GetNamespace(), app, "")
		}), builder.WithPredicates(podInjectionChanged)).
		// Another instance installed or removed may take the apps its
		// labels also select, or leave them to this one.
		Watches(&admissionregistrationv1.MutatingWebhookConfiguration{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return r.appsInNamespace(ctx, "")
		}), builder.WithPredicates(otherInstances(names))).
		// Every route, once KEDA's API appears (see keda).
		WatchesRawSource(source.Channel(r.keda.resync, &handler.EnqueueRequestForObject{})).
		// Reconciles of different Deployments side by side: each waits on
		// the API server for its applies, and a fleet created at once
		// queued behind one worker (1,000 apps routed 7m48s after the last
		// apply). One Deployment is never reconciled twice at once.
		WithOptions(controller.Options{MaxConcurrentReconciles: routeWorkers}).
		Build(r)
	if err != nil {
		return err
	}
	if err := r.watchScaledObjects(mgr, ctl); err != nil {
		return err
	}
	if err := r.watchCustomKinds(ctx, mgr, ctl); err != nil {
		return err
	}
	return r.watchHTTPRoutes(ctx, mgr, ctl)
}

// otherInstances lets through the creation and deletion of another ebb
// instance's MutatingWebhookConfiguration (named as ConfigurationName
// names them), not the others' in the cluster (cert-manager's, Istio's,
// Helm hooks'): each one let through reconciles every app.
func otherInstances(names groupsuffix.Names) predicate.Funcs {
	own := ConfigurationName(names)
	prefix := strings.TrimSuffix(own, names.Suffix())
	other := func(o client.Object) bool { return strings.HasPrefix(o.GetName(), prefix) && o.GetName() != own }
	return predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return other(e.Object) },
		DeleteFunc:  func(e event.DeleteEvent) bool { return other(e.Object) },
		UpdateFunc:  func(event.UpdateEvent) bool { return false },
		GenericFunc: func(e event.GenericEvent) bool { return other(e.Object) },
	}
}

// podInjectionChanged lets through the pod events that may change
// PodsInjected: a pod created or deleted, one that starts terminating or
// ends, or gains or loses the sidecar.
var podInjectionChanged = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	o, ok1 := e.ObjectOld.(*corev1.Pod)
	n, ok2 := e.ObjectNew.(*corev1.Pod)
	if !ok1 || !ok2 {
		return true
	}
	return podLive(o) != podLive(n) || inject.HasSidecar(&o.Spec) != inject.HasSidecar(&n.Spec)
}}

// podLive is false for a pod that is terminating or has ended.
func podLive(p *corev1.Pod) bool {
	return p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

// claimants are the workloads of namespace, of any kind, whose pod
// template names app, but the one whose request name (workloadRequest) is
// except.
func (r *routeReconciler) claimants(ctx context.Context, namespace, app, except string) []reconcile.Request {
	wls, err := r.workloads.list(ctx, namespace, app)
	if err != nil {
		r.log.Error(err, "list workloads by app", "namespace", namespace, "app", app)
		return nil
	}
	return requests(wls, except)
}

// appsInNamespace are the workloads of namespace (every namespace when
// it is "") whose pod template carries this instance's app label.
func (r *routeReconciler) appsInNamespace(ctx context.Context, namespace string) []reconcile.Request {
	wls, err := r.workloads.list(ctx, namespace, "")
	if err != nil {
		r.log.Error(err, "list workloads", "namespace", namespace)
		return nil
	}
	return requests(wls, "")
}

// sharingHosts are the Deployments of the other AppRoutes, in any
// namespace, that claim one of route's hosts or one of its Service's
// cluster names, or that name the same Service (whose cluster names they
// claim too): route's change may decide which of them serves it.
func (r *routeReconciler) sharingHosts(ctx context.Context, route *routingv1alpha1.AppRoute) []reconcile.Request {
	names := routeHosts(route)
	svc := route.Spec.Service.Name
	if svc != "" {
		base := svc + "." + route.Namespace
		names = append(names, base, base+".svc", base+".svc."+routing.ClusterDomain)
	}
	return r.routesMatching(ctx, route, func(o *routingv1alpha1.AppRoute) bool {
		return slices.ContainsFunc(routeHosts(o), func(h string) bool { return slices.Contains(names, h) }) ||
			svc != "" && o.Namespace == route.Namespace && o.Spec.Service.Name == svc
	})
}

// routesClaiming are the Deployments of the AppRoutes, but except's, with
// a host for which claims is true.
func (r *routeReconciler) routesClaiming(ctx context.Context, except *routingv1alpha1.AppRoute, claims func(host string) bool) []reconcile.Request {
	return r.routesMatching(ctx, except, func(o *routingv1alpha1.AppRoute) bool { return slices.ContainsFunc(routeHosts(o), claims) })
}

// routeHosts are the hosts a route claims: spec.hosts and spec.hostPaths'.
func routeHosts(route *routingv1alpha1.AppRoute) []string {
	out := slices.Clip(route.Spec.Hosts)
	for _, hp := range route.Spec.HostPaths {
		out = append(out, hp.Host)
	}
	return out
}

// routesMatching are the Deployments of the AppRoutes, but except's, that
// match.
func (r *routeReconciler) routesMatching(ctx context.Context, except *routingv1alpha1.AppRoute, match func(*routingv1alpha1.AppRoute) bool) []reconcile.Request {
	var list routingv1alpha1.AppRouteList
	if err := r.routes.client.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		r.log.Error(err, "list AppRoutes")
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		o := &list.Items[i]
		if except != nil && o.Namespace == except.Namespace && o.Name == except.Name {
			continue
		}
		if req, ok := targetRequest(o); ok && match(o) {
			reqs = append(reqs, req)
		}
	}
	return reqs
}

// underDomain is true for a host (or wildcard) that is domain or lies under it.
func underDomain(domain string) func(string) bool {
	return func(h string) bool {
		h = strings.TrimPrefix(h, "*.")
		return h == domain || strings.HasSuffix(h, "."+domain)
	}
}

// conflicted is the Conflicted condition of route: the hosts and paths it
// claims and does not serve, by the activators' own rule (package routing):
// an older AppRoute's, another namespace's cluster names, a domain a
// DomainClaim binds to another namespace, or not a host name at all.
func (r *routeReconciler) conflicted(ctx context.Context, route *routingv1alpha1.AppRoute) (metav1.Condition, error) {
	cond := metav1.Condition{Type: routingv1alpha1.ConditionConflicted, ObservedGeneration: route.Generation,
		Status: metav1.ConditionFalse, Reason: "NoConflict", Message: "this route serves every host and path it claims"}
	if len(route.Spec.Hosts) == 0 && len(route.Spec.HostPaths) == 0 {
		return cond, nil
	}
	var list routingv1alpha1.AppRouteList
	if err := r.routes.client.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		return cond, fmt.Errorf("list AppRoutes: %w", err)
	}
	claims, err := r.domainClaims(ctx)
	if err != nil {
		return cond, err
	}
	rs := make([]routing.Route[struct{}], len(list.Items))
	for i, o := range list.Items {
		// A Service's cluster names count; its ClusterIPs need not: no
		// host may be an IP literal.
		rs[i] = routing.Route[struct{}]{Key: routing.Key{Namespace: o.Namespace, Name: o.Name}, Created: o.CreationTimestamp.Time,
			Hosts: o.Spec.Hosts, PathPrefixes: o.Spec.PathPrefixes, HostPaths: hostPaths(o.Spec.HostPaths), Service: o.Spec.Service.Name}
	}
	me := routing.Key{Namespace: route.Namespace, Name: route.Name}
	hosts := routeHosts(route)
	var lost []string
	reason := ""
	for _, c := range routing.Build(rs, claims).Conflicts {
		if c.Loser != me {
			continue
		}
		host := c.Host // a wildcard's is its suffix
		if !slices.Contains(hosts, host) && slices.Contains(hosts, "*."+host) {
			host = "*." + host
		}
		what := fmt.Sprintf("host %s (%s)", host, c.Reason) // refused whatever the path
		if c.Reason == routing.ReasonOlderRoute || c.Reason == routing.ReasonServiceName {
			what = fmt.Sprintf("host %s path %s (%s: AppRoute %s/%s serves it)", host, c.Prefix, c.Reason, c.Winner.Namespace, c.Winner.Name)
		}
		if !slices.Contains(lost, what) {
			lost = append(lost, what)
		}
		// The first reason names the condition; the message lists all.
		reason = cmp.Or(reason, c.Reason)
	}
	if len(lost) > 0 {
		cond.Status, cond.Reason = metav1.ConditionTrue, reason
		cond.Message = "not served by this route: " + strings.Join(lost, ", ") +
			"; give each app hosts or paths of its own (a namespace's Service names and the domains a DomainClaim binds to a namespace route only to that namespace)"
	}
	return cond, nil
}

// domainClaims are this instance's DomainClaims: domain → namespace.
func (r *routeReconciler) domainClaims(ctx context.Context) (routing.Claims, error) {
	var list routingv1alpha1.DomainClaimList
	if err := r.routes.client.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list DomainClaims: %w", err)
	}
	claims := make(routing.Claims, len(list.Items))
	for _, c := range list.Items {
		claims[c.Name] = c.Spec.Namespace
	}
	return claims, nil
}

// podsInjected is the PodsInjected condition of route: whether every live
// pod of its workload runs the sidecar. The pods come from the manager's
// cache, which holds the pods labelled <suffix>/app (the template of a
// workload this instance routes has the label, so its pods do too) and
// whose watch brings a reconcile when one changes (podInjectionChanged).
func (r *routeReconciler) podsInjected(ctx context.Context, route *routingv1alpha1.AppRoute, w *workload.Workload) (metav1.Condition, error) {
	cond := metav1.Condition{Type: routingv1alpha1.ConditionPodsInjected, ObservedGeneration: route.Generation,
		Status: metav1.ConditionTrue, Reason: "AllInjected", Message: "every pod of the app runs the ebb sidecar"}
	sel, err := metav1.LabelSelectorAsSelector(w.Selector)
	if err != nil || sel.Empty() {
		return cond, nil // the API server refuses such Deployments and StatefulSets
	}
	var pods corev1.PodList
	if err := r.routes.client.List(ctx, &pods, client.InNamespace(w.Namespace()), client.MatchingLabelsSelector{Selector: sel}, client.UnsafeDisableDeepCopy); err != nil {
		return cond, fmt.Errorf("list pods of %s in %s: %w", w.Ref(), w.Namespace(), err)
	}
	live, without := 0, 0
	for i := range pods.Items {
		p := &pods.Items[i]
		if !podLive(p) {
			continue
		}
		live++
		if !inject.HasSidecar(&p.Spec) {
			without++
		}
	}
	if without > 0 {
		cond.Status, cond.Reason = metav1.ConditionFalse, "PodsWithoutSidecar"
		cond.Message = fmt.Sprintf("%d of %d pods run without the ebb sidecar (they started before the namespace was labelled, or while the webhook was down): "+
			"ebb cannot count their requests and keeps the app from scaling to zero; restart them: %s",
			without, live, restartHint(w))
	}
	return cond, nil
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
		if req, ok := targetRequest(route); ok && (match == nil || match(route, o)) {
			reqs = append(reqs, req)
		}
	}
	return reqs
}

// decision is whether this instance routes a Deployment, and if not why.
type decision struct {
	routes bool
	why    string
}

// decide applies the routing rule (see routeReconciler) to a pod template
// in a namespace labelled nsLabels.
func (r *routeReconciler) decide(ctx context.Context, nsLabels map[string]string, tmpl *corev1.PodTemplateSpec) (decision, error) {
	names := r.routes.names
	if nsLabels[names.InjectLabel()] != groupsuffix.InjectEnabled {
		return decision{why: fmt.Sprintf("the namespace is not labelled %s=%s", names.InjectLabel(), groupsuffix.InjectEnabled)}, nil
	}
	if _, ok := tmpl.Labels[names.AppLabel()]; !ok {
		return decision{why: "the pod template has no label " + names.AppLabel()}, nil
	}
	var d decision
	for _, n := range injectors(nsLabels, tmpl.Labels) {
		if n.Suffix() == names.Suffix() {
			d.routes = true
			return d, nil
		}
		var mwc admissionregistrationv1.MutatingWebhookConfiguration
		err := r.routes.client.Get(ctx, types.NamespacedName{Name: ConfigurationName(n)}, &mwc, client.UnsafeDisableDeepCopy)
		switch {
		case apierrors.IsNotFound(err):
			continue // labels alike, but no such instance is installed
		case err != nil:
			return d, fmt.Errorf("get MutatingWebhookConfiguration %s: %w", ConfigurationName(n), err)
		}
		d.why = fmt.Sprintf("ebb instance %s injects these pods (its webhook %s is called before %s), so it routes them", n.Suffix(), ConfigurationName(n), ConfigurationName(names))
		return d, nil
	}
	return d, errors.New("injectors left out this instance") // cannot happen: both labels were checked
}

// winner is the workload that gets the AppRoute of app among the
// workloads of any kind in the namespace this instance routes: the oldest,
// then by kind and name (workload.Older), so two workloads with one app
// name never take it in turns.
func (r *routeReconciler) winner(ctx context.Context, nsLabels map[string]string, w *workload.Workload, app string) (*workload.Workload, error) {
	list, err := r.workloads.list(ctx, w.Namespace(), app)
	if err != nil {
		return nil, fmt.Errorf("list the workloads of app %s: %w", app, err)
	}
	best := w
	for _, o := range list {
		if o.Object.GetUID() == w.Object.GetUID() || !workload.Older(o, best) {
			continue
		}
		dec, err := r.decide(ctx, nsLabels, &o.Template)
		if err != nil {
			return nil, err
		}
		if dec.routes {
			best = o
		}
	}
	return best, nil
}

// restartHint is how to restart w's pods: kubectl rollout restart for the
// kinds it knows, deleting them for a custom kind (its controller makes
// them anew).
func restartHint(w *workload.Workload) string {
	if w.GVK.Group == "apps" {
		return fmt.Sprintf("kubectl rollout restart %s -n %s", w.Ref(), w.Namespace())
	}
	return fmt.Sprintf("delete them, and %s makes them anew (kubectl delete pods -n %s -l %s)", w.Ref(), w.Namespace(), metav1.FormatLabelSelector(w.Selector))
}

// Reconcile handles one workload: a Deployment, a StatefulSet or an object
// of a listed custom kind (workloadRequest).
func (r *routeReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	names := r.routes.names
	c := r.routes.client
	w, err := r.workloads.get(ctx, req)
	if err != nil || w == nil {
		// Gone: the garbage collector deletes its AppRoutes.
		return reconcile.Result{}, err
	}
	d := w.Object // events regard it
	owned, err := r.ownedRoutes(ctx, d)
	if err != nil {
		return reconcile.Result{}, err
	}
	if _, ok := w.Template.Labels[names.AppLabel()]; !ok && len(owned) == 0 {
		return reconcile.Result{}, nil // not an app of this instance: the common case
	}
	var ns corev1.Namespace
	if err := c.Get(ctx, types.NamespacedName{Name: w.Namespace()}, &ns); err != nil {
		return reconcile.Result{}, fmt.Errorf("get namespace %s: %w", w.Namespace(), err)
	}
	dec, err := r.decide(ctx, ns.Labels, &w.Template)
	if err != nil {
		return reconcile.Result{}, err
	}
	if !dec.routes {
		if _, labelled := w.Template.Labels[names.AppLabel()]; labelled && len(injectors(ns.Labels, w.Template.Labels)) == 0 {
			// No instance selects these pods: the app runs without a sidecar.
			r.recorder.Eventf(d, nil, corev1.EventTypeWarning, "NamespaceNotOptedIn", "SyncAppRoute",
				"the pod template is labelled %s but namespace %s is not labelled %s=%s: ebb injects no sidecar and routes nothing; label the namespace, then restart the pods",
				names.AppLabel(), w.Namespace(), names.InjectLabel(), groupsuffix.InjectEnabled)
		}
		return reconcile.Result{}, r.deleteRoutes(ctx, owned, dec.why)
	}
	done := reconcile.Result{}

	app := w.Template.Labels[names.AppLabel()]
	winner, err := r.winner(ctx, ns.Labels, w, app)
	if err != nil {
		return reconcile.Result{}, err
	}
	var stale []routingv1alpha1.AppRoute
	for _, o := range owned {
		if o.Name != app {
			stale = append(stale, o)
		}
	}
	if err := r.deleteRoutes(ctx, stale, "the app was renamed"); err != nil {
		return reconcile.Result{}, err
	}
	if winner != w {
		// The route, if this workload still owns it, passes to the winner
		// when the winner's reconcile applies it.
		r.recorder.Eventf(d, nil, corev1.EventTypeWarning, "AppNameTaken", "SyncAppRoute",
			"AppRoute %s routes %s, which claimed the app name first; give each workload its own %s label value", app, winner.Ref(), names.AppLabel())
		return done, nil
	}

	if unknown := inject.UnknownKeys(&w.Template.ObjectMeta, names); len(unknown) > 0 {
		r.recorder.Eventf(d, nil, corev1.EventTypeWarning, "UnknownKeys", "SyncAppRoute", "%s", strings.Join(unknown, "; "))
	}
	want, appCfg, svc, report, err := r.routes.desired(ctx, w)
	var refusal *inject.RefusalError
	if errors.As(err, &refusal) {
		r.recorder.Eventf(d, nil, corev1.EventTypeWarning, "InvalidAnnotations", "SyncAppRoute", "%s", refusal.Error())
		for i := range owned {
			if owned[i].Name != app {
				continue
			}
			st := owned[i].Status.DeepCopy()
			meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: routingv1alpha1.ConditionReady, Status: metav1.ConditionFalse,
				Reason: "InvalidAnnotations", Message: refusal.Error(), ObservedGeneration: owned[i].Generation})
			if err := r.applyStatus(ctx, &owned[i], st); err != nil {
				return reconcile.Result{}, err
			}
		}
		return done, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	previous, err := r.routes.apply(ctx, want)
	if err != nil {
		return reconcile.Result{}, err
	}
	if previous != "" {
		r.recorder.Eventf(d, nil, corev1.EventTypeNormal, "AppRouteTakenOver", "SyncAppRoute",
			"AppRoute %s routed %s and now routes this one", want.Name, previous)
	}
	var current routingv1alpha1.AppRoute
	if err := c.Get(ctx, client.ObjectKeyFromObject(want), &current); err != nil {
		// Not in the cache yet: the watch on AppRoutes brings us back.
		return done, client.IgnoreNotFound(err)
	}
	r.reportSkipped(&current, report.skipped)
	st, err := r.status(ctx, &current, w, appCfg, svc, report.fallback)
	if err != nil {
		return reconcile.Result{}, err
	}
	st.HostSources = report.sources
	return done, r.applyStatus(ctx, &current, st)
}

// maxEventNote is the most an event's note holds (events.k8s.io/v1: 1 kB).
const maxEventNote = 1024

// reportSkipped sends a Warning event HostsSkipped on route saying what of
// its Ingresses and HTTPRoutes was not taken, when that changed since the
// last event this replica sent for it.
func (r *routeReconciler) reportSkipped(route *routingv1alpha1.AppRoute, skipped []string) {
	key := types.NamespacedName{Namespace: route.Namespace, Name: route.Name}
	note := strings.Join(skipped, "; ")
	if len(note) > maxEventNote {
		const more = " … (more in the Ingresses and HTTPRoutes of the namespace)"
		note = strings.ToValidUTF8(note[:maxEventNote-len(more)], "") + more
	}
	if note == "" {
		r.skipped.Delete(key)
		return
	}
	if last, ok := r.skipped.Swap(key, note); ok && last == note {
		return
	}
	r.recorder.Eventf(route, nil, corev1.EventTypeWarning, "HostsSkipped", "SyncAppRoute", "%s", note)
}

// forgetSkipped drops the last HostsSkipped note of a deleted AppRoute:
// a route deleted and made again is told what it skips, and the replica
// keeps no note per route that once existed.
func (r *routeReconciler) forgetSkipped(_ context.Context, e event.DeleteEvent, _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	if e.Object != nil {
		r.skipped.Delete(types.NamespacedName{Namespace: e.Object.GetNamespace(), Name: e.Object.GetName()})
	}
}

// hostPaths converts an AppRoute's spec.hostPaths for the routing table.
func hostPaths(in []routingv1alpha1.HostPaths) []routing.HostPaths {
	if len(in) == 0 {
		return nil
	}
	out := make([]routing.HostPaths, len(in))
	for i, hp := range in {
		out[i] = routing.HostPaths{Host: hp.Host, PathPrefixes: hp.PathPrefixes}
	}
	return out
}

func (r *routeReconciler) ownedRoutes(ctx context.Context, d client.Object) ([]routingv1alpha1.AppRoute, error) {
	var list routingv1alpha1.AppRouteList
	if err := r.routes.client.List(ctx, &list, client.InNamespace(d.GetNamespace())); err != nil {
		return nil, fmt.Errorf("list AppRoutes in %s: %w", d.GetNamespace(), err)
	}
	var owned []routingv1alpha1.AppRoute
	for _, route := range list.Items {
		for _, ref := range route.OwnerReferences {
			if ref.UID == d.GetUID() {
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
func (r *routeReconciler) status(ctx context.Context, route *routingv1alpha1.AppRoute, d *workload.Workload, app inject.App, svc *corev1.Service, fallback *metav1.Condition) (*routingv1alpha1.AppRouteStatus, error) {
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
	conflicted, err := r.conflicted(ctx, route)
	if err != nil {
		return nil, err
	}
	injected, err := r.podsInjected(ctx, route, d)
	if err != nil {
		return nil, err
	}
	meta.SetStatusCondition(&st.Conditions, reachable)
	meta.SetStatusCondition(&st.Conditions, ready)
	meta.SetStatusCondition(&st.Conditions, conflicted)
	meta.SetStatusCondition(&st.Conditions, injected)
	meta.SetStatusCondition(&st.Conditions, r.scaledBy(ctx, route))
	if st.Dependencies, err = r.dependencies(ctx, appKey{route.Namespace, route.Name}); err != nil {
		return nil, err
	}
	if fallback == nil {
		meta.RemoveStatusCondition(&st.Conditions, routingv1alpha1.ConditionFallbackReady)
	} else {
		c := *fallback
		c.ObservedGeneration = route.Generation
		meta.SetStatusCondition(&st.Conditions, c)
	}
	return st, nil
}

// fallbackReady is the FallbackReady condition of the fallback an app of
// namespace ns asks for (fb), whose own Service is appService: True when
// the activator may send held requests there, the only case in which the
// AppRoute's spec.fallback is written (desired). The activator dials the
// Service's ClusterIP, so the Service must have one (not ExternalName, not
// headless), select pods (a selector-less Service's endpoints are written
// by hand and may name another namespace's pods or the activators
// themselves), be no ebb app's Service of this instance (at zero its
// ClusterIP leads back to the activators), and have the TCP port held
// requests would go to (the one named, else its first TCP port).
func (r *routes) fallbackReady(ctx context.Context, ns string, fb *routingv1alpha1.ServiceReference, appService string) (metav1.Condition, error) {
	key := r.names.Key(inject.AnnotationFallback)
	cond := metav1.Condition{Type: routingv1alpha1.ConditionFallbackReady, Status: metav1.ConditionFalse}
	refuse := func(reason, why string) (metav1.Condition, error) {
		cond.Reason = reason
		cond.Message = fmt.Sprintf("the fallback Service %s %s; held requests get no fallback: set %s to another Service", fb.Name, why, key)
		return cond, nil
	}
	if fb.Name == appService {
		return refuse("FallbackIsAppService", "is the app's own, which has no ready pod when the fallback would be used")
	}
	var svc corev1.Service
	err := r.client.Get(ctx, types.NamespacedName{Namespace: ns, Name: fb.Name}, &svc, client.UnsafeDisableDeepCopy) // read only
	switch {
	case apierrors.IsNotFound(err):
		cond.Reason = "ServiceNotFound"
		cond.Message = fmt.Sprintf("the fallback Service %s (%s) does not exist in namespace %s; create it, or change or remove the annotation", fb.Name, key, ns)
		return cond, nil
	case err != nil:
		return cond, fmt.Errorf("get fallback Service %s/%s: %w", ns, fb.Name, err)
	}
	switch {
	case svc.Spec.Type == corev1.ServiceTypeExternalName:
		return refuse("ExternalName", "is of type ExternalName, which has no ClusterIP for the activator to send held requests to")
	case svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == corev1.ClusterIPNone:
		return refuse("NoClusterIP", "is headless (clusterIP: None), which has no ClusterIP for the activator to send held requests to")
	case len(svc.Spec.Selector) == 0:
		return refuse("NoSelector", "selects no pods: its endpoints are written by hand and could name any address of the cluster, another namespace's pods or the activators; give it a selector")
	}
	var routes routingv1alpha1.AppRouteList
	if err := r.client.List(ctx, &routes, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil { // read only
		return cond, fmt.Errorf("list AppRoutes in %s: %w", ns, err)
	}
	for _, other := range routes.Items {
		if other.Spec.Service.Name == fb.Name {
			return refuse("FallbackIsEbbApp", fmt.Sprintf("is the Service of ebb app %s, which at zero sends requests back to the activators", other.Name))
		}
	}
	var tcp []string
	for _, p := range svc.Spec.Ports {
		if p.Protocol != "" && p.Protocol != corev1.ProtocolTCP {
			continue
		}
		if fb.Port == 0 || p.Port == fb.Port {
			cond.Status, cond.Reason = metav1.ConditionTrue, "ServiceFound"
			cond.Message = fmt.Sprintf("a held request goes to Service %s port %d when the app has no ready pod within its cold-start timeout or its hold queue is full", fb.Name, p.Port)
			return cond, nil
		}
		tcp = append(tcp, fmt.Sprint(p.Port))
	}
	if len(tcp) == 0 {
		cond.Reason = "NoTCPPort"
		cond.Message = fmt.Sprintf("the fallback Service %s has no TCP port; give it one, or name another Service in %s", fb.Name, key)
		return cond, nil
	}
	cond.Reason = "NoSuchPort"
	cond.Message = fmt.Sprintf("the fallback Service %s has no TCP port %d (its TCP ports: %s); set %s to %s:<one of them>", fb.Name, fb.Port, strings.Join(tcp, ", "), key, fb.Name)
	return cond, nil
}

// applyStatus writes the controller's conditions and fields by server-side
// apply on the status subresource, unless nothing changed.
func (r *routeReconciler) applyStatus(ctx context.Context, route *routingv1alpha1.AppRoute, st *routingv1alpha1.AppRouteStatus) error {
	if equality.Semantic.DeepEqual(&route.Status, st) {
		return nil
	}
	var mine []metav1.Condition
	for _, c := range st.Conditions {
		switch c.Type {
		case routingv1alpha1.ConditionReady, routingv1alpha1.ConditionSidecarReachable, routingv1alpha1.ConditionConflicted, routingv1alpha1.ConditionPodsInjected, routingv1alpha1.ConditionScaledByKEDA,
			routingv1alpha1.ConditionFallbackReady:
			mine = append(mine, c)
		}
	}
	status := map[string]any{
		"observedGeneration": st.ObservedGeneration,
		"conditions":         mine,
		"readyEndpoints":     st.ReadyEndpoints,
		"activatorInPath":    st.ActivatorInPath,
	}
	if len(st.HostSources) > 0 {
		status["hostSources"] = st.HostSources // left out, the apply drops them
	}
	if len(st.Dependencies) > 0 {
		status["dependencies"] = st.Dependencies
	}
	body, err := json.Marshal(map[string]any{
		"apiVersion": routingv1alpha1.GroupVersion(r.routes.names.Group()).String(),
		"kind":       routingv1alpha1.Kind,
		"metadata":   map[string]any{"name": route.Name, "namespace": route.Namespace},
		"status":     status,
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
