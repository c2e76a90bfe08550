package webhook

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
)

// gatewayCheckInterval is how often every replica whose API server does
// not serve the Gateway API's HTTPRoutes asks its discovery again: one
// request for the whole replica, whatever the number of apps. While they
// are served, HTTPRoutes come from a watch, and nothing polls.
var gatewayCheckInterval = time.Minute

// httpRouteResource is the HTTPRoutes' resource in discovery.
const httpRouteResource = "httproutes"

// optionalAPI is the controller's view of a resource whose CRD may come
// and go: the Gateway API's HTTPRoutes (gateway.networking.k8s.io/v1,
// newGatewayAPI), and each custom workload kind listed in --scale-targets
// (newScaleTargetAPIs). What follows says it of HTTPRoutes; for a workload
// kind, what is reconciled when it goes is nothing (the garbage collector
// deletes the AppRoutes its objects owned). Its CRDs are optional: while they are
// absent nothing reads HTTPRoutes (a watch on a missing API would keep the
// controller from starting, then fail its lists for good), and every
// gatewayCheckInterval a discovery request looks again. When HTTPRoutes
// appear, the watch starts, and its first list brings the routes of the
// Services they name. When they go, the API server deletes every HTTPRoute
// with the CRD, which the watch sees, then the informer's list fails "not
// found": that failure (watchError) brings a look at once, which removes
// the informer and reconciles once more the routes whose hosts came from
// an HTTPRoute. Like keda, it runs in every replica.
type optionalAPI struct {
	// mu orders reads of HTTPRoutes (read) against the informer's start
	// and removal (write): a read after the removal must not start an
	// informer on a missing API through the cache. A read holds it only
	// while the informer has synced (synced), when the cache's List
	// returns at once: a List on an informer not synced waits for its
	// sync, for good if the API went or its list keeps failing, and the
	// look that removes the informer would wait behind it, and every later
	// read behind the look.
	mu        sync.RWMutex
	installed bool
	// synced tells whether the API's informer has synced, without
	// waiting for it.
	synced func(context.Context) bool
	// poke brings a look before the next interval (watchError).
	poke chan struct{}

	// gv and resource are what discovery serves (gv may be filled by
	// resolve on the first look); kind is the informer's kind, which its
	// watch errors name; what names it in logs; gone runs when it goes.
	gv, resource, what string
	// describes is true of the type description of the resource's
	// informer (client-go's Reflector.TypeDescription).
	describes func(string) bool
	resolve   func() (string, error)
	gone      func(context.Context)

	discovery discovery.DiscoveryInterface
	// watch starts the HTTPRoute watch on the controller; unwatch stops
	// its informer.
	watch   func() error
	unwatch func(context.Context) error
	elected <-chan struct{}
	resync  chan<- event.GenericEvent
	routes  client.Reader
	log     logr.Logger
}

var _ manager.LeaderElectionRunnable = (*optionalAPI)(nil)

// NeedLeaderElection is false: every replica follows the API.
func (g *optionalAPI) NeedLeaderElection() bool { return false }

// errNotSynced: an optional API is served, and its informer has not
// synced yet; the reconcile is retried (the informer's first list brings
// the reconciles its objects need anyway). read wraps it with the API's
// name (what), so that the retried reconcile's error says which.
var errNotSynced = errors.New("served, but its informer has not synced yet")

// read runs fn, which reads HTTPRoutes from the cache, if they are served
// and their informer has synced; errNotSynced, naming the API, if it has
// not.
func (g *optionalAPI) read(ctx context.Context, fn func() error) error {
	if g == nil {
		return nil
	}
	g.mu.RLock()
	defer g.mu.RUnlock()
	if !g.installed {
		return nil
	}
	if !g.synced(ctx) {
		return fmt.Errorf("%s: %w", g.what, errNotSynced)
	}
	return fn()
}

// present asks the API server's discovery whether the resource is served.
func (g *optionalAPI) present() (bool, error) {
	if g.gv == "" {
		gv, err := g.resolve()
		if gv == "" || err != nil {
			return false, err
		}
		g.gv = gv
	}
	list, err := g.discovery.ServerResourcesForGroupVersion(g.gv)
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, err
	}
	return slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == g.resource }), nil
}

// look checks discovery once and follows what it says: the watch started
// when HTTPRoutes appeared, stopped when they went. A discovery error
// changes nothing.
func (g *optionalAPI) look(ctx context.Context) error {
	ok, err := g.present()
	if err != nil {
		g.log.V(1).Info("cannot look for "+g.what+"; looking again at the next interval", "error", err.Error())
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case ok && !g.installed:
		if err := g.watch(); err != nil {
			return fmt.Errorf("watch %s: %w", g.what, err)
		}
		g.installed = true
		g.log.Info(g.what + " are served: watching them")
	case !ok && g.installed:
		g.installed = false
		if err := g.unwatch(ctx); err != nil {
			return fmt.Errorf("stop watching %s: %w", g.what, err)
		}
		g.log.Info(g.what + " are no longer served: stopped watching them")
		if g.gone != nil {
			go g.gone(ctx)
		}
	}
	return nil
}

// newGatewayAPI is the Gateway API's view before the controller sets it
// up (watchHTTPRoutes): the cache's watch error handler needs it first.
func newGatewayAPI() *optionalAPI {
	g := &optionalAPI{poke: make(chan struct{}, 1), gv: gatewayv1.GroupVersion.String(), resource: httpRouteResource,
		what: "the Gateway API's HTTPRoutes", describes: func(d string) bool { return strings.HasSuffix(d, ".HTTPRoute") }}
	g.gone = g.reconcileFromHTTPRoutes
	return g
}

// optionalAPIs are every optional API of the webhook: the manager's cache
// has one watch error handler for them all.
type optionalAPIs []*optionalAPI

// watchError is every informer's watch error handler (the manager's
// cache): client-go's, and when the list of an optional API's informer
// finds the API gone, a look at once.
func (apis optionalAPIs) watchError(ctx context.Context, r *toolscache.Reflector, err error) {
	toolscache.DefaultWatchErrorHandler(ctx, r, err)
	if !apierrors.IsNotFound(err) {
		return
	}
	for _, g := range apis {
		// A typed informer is described by its Go type (….HTTPRoute), an
		// unstructured one by its GVK (example.com/v1, Kind=Worker).
		if g.describes(r.TypeDescription()) {
			select {
			case g.poke <- struct{}{}:
			default:
			}
		}
	}
}

// Start (a manager runnable, in every replica) looks every
// gatewayCheckInterval while HTTPRoutes are not served, and when poked.
func (g *optionalAPI) Start(ctx context.Context) error {
	t := time.NewTicker(gatewayCheckInterval)
	defer t.Stop()
	for {
		g.mu.RLock()
		var tick <-chan time.Time
		if !g.installed {
			tick = t.C
		}
		g.mu.RUnlock()
		select {
		case <-ctx.Done():
			return nil
		case <-tick:
		case <-g.poke:
		}
		if err := g.look(ctx); err != nil {
			return err
		}
	}
}

// reconcileFromHTTPRoutes reconciles, in the leading replica, the routes
// whose status says a host came from an HTTPRoute.
func (g *optionalAPI) reconcileFromHTTPRoutes(ctx context.Context) {
	select {
	case <-g.elected:
	case <-ctx.Done():
		return
	}
	var list routingv1alpha1.AppRouteList
	if err := g.routes.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		g.log.Error(err, "list AppRoutes to drop the hosts of HTTPRoutes")
		return
	}
	for i := range list.Items {
		r := &list.Items[i]
		req, ok := targetRequest(r)
		if !ok || !slices.ContainsFunc(r.Status.HostSources, func(s routingv1alpha1.HostSource) bool {
			return slices.ContainsFunc(s.From, func(f string) bool { return strings.HasPrefix(f, "HTTPRoute/") })
		}) {
			continue
		}
		select {
		case g.resync <- resyncEvent(req):
		case <-ctx.Done():
			return
		}
	}
}

// watchHTTPRoutes sets r.routes.gateway up on ctl: the HTTPRoute watch at
// once if the API server serves HTTPRoutes, and the runnable that follows
// them coming and going. A discovery error counts as absent: the runnable
// looks again.
func (r *routeReconciler) watchHTTPRoutes(ctx context.Context, mgr ctrl.Manager, ctl controller.Controller) error {
	dc, err := discovery.NewDiscoveryClientForConfig(mgr.GetConfig())
	if err != nil {
		return fmt.Errorf("discovery client: %w", err)
	}
	if r.routes.gateway == nil {
		r.routes.gateway = newGatewayAPI()
	}
	g := r.routes.gateway
	g.discovery, g.elected, g.resync, g.routes, g.log = dc, mgr.Elected(), r.keda.resync, mgr.GetClient(), r.log
	// A change reconciles the routes of the Services its backendRefs
	// name, before and after (EnqueueRequestsFromMapFunc maps both
	// objects of an update). Only spec changes count: Gateway
	// controllers write the status.
	g.watch = func() error {
		return ctl.Watch(source.Kind[client.Object](mgr.GetCache(), &gatewayv1.HTTPRoute{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			hr, ok := o.(*gatewayv1.HTTPRoute)
			if !ok {
				return nil
			}
			return r.routesOfServices(ctx, hr.Namespace, httpRouteServices(hr))
		}), predicate.GenerationChangedPredicate{}))
	}
	g.unwatch = func(ctx context.Context) error { return mgr.GetCache().RemoveInformer(ctx, &gatewayv1.HTTPRoute{}) }
	g.synced = func(ctx context.Context) bool {
		inf, err := mgr.GetCache().GetInformer(ctx, &gatewayv1.HTTPRoute{}, cache.BlockUntilSynced(false))
		return err == nil && inf.HasSynced()
	}
	if err := g.look(ctx); err != nil {
		return err
	}
	if !g.installed {
		r.log.Info("the Gateway API's HTTPRoutes are not served; looking for them again every interval", "interval", gatewayCheckInterval)
	}
	return mgr.Add(g)
}

// routesOfServices maps Services of ns (named by an Ingress or HTTPRoute)
// to the Deployments of the AppRoutes that name one of them.
func (r *routeReconciler) routesOfServices(ctx context.Context, ns string, services []string) []reconcile.Request {
	if len(services) == 0 {
		return nil
	}
	return r.enqueueRoutes(ctx, ns, nil, func(route *routingv1alpha1.AppRoute, _ client.Object) bool {
		return slices.Contains(services, route.Spec.Service.Name)
	})
}
