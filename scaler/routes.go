package scaler

import (
	"context"
	"sort"
	"strings"

	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/groupsuffix"
)

// route is what the scaler keeps of an AppRoute: its name and its Idle
// condition. The informer's transform makes it from the AppRoute, so the
// cache of a fleet's AppRoutes holds a few hundred bytes per app, not the
// whole object with its managedFields.
type route struct {
	metav1.TypeMeta
	metav1.ObjectMeta // Name, Namespace, ResourceVersion, Generation only

	idle  *metav1.Condition // nil: the AppRoute has none
	wakes []appKey          // spec.wakes: the apps it needs (indexed by wakesIndex)
}

// DeepCopyObject makes route a runtime.Object for the informer's store.
func (r *route) DeepCopyObject() runtime.Object {
	out := &route{TypeMeta: r.TypeMeta}
	r.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	if r.idle != nil {
		c := *r.idle
		out.idle = &c
	}
	out.wakes = append([]appKey(nil), r.wakes...)
	return out
}

// slimRoute is the informer's transform: an AppRoute becomes a route.
func slimRoute(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil // a DeletedFinalStateUnknown, or a route already
	}
	r := &route{ObjectMeta: metav1.ObjectMeta{Name: u.GetName(), Namespace: u.GetNamespace(), ResourceVersion: u.GetResourceVersion(), Generation: u.GetGeneration(), UID: u.GetUID()}}
	wakes, _, _ := unstructured.NestedSlice(u.Object, "spec", "wakes")
	for _, w := range wakes {
		m, ok := w.(map[string]any)
		if !ok {
			continue
		}
		name, _ := m["app"].(string)
		ns, _ := m["namespace"].(string)
		if ns == "" {
			ns = r.Namespace // the webhook always fills it; an older one may not
		}
		if name != "" {
			r.wakes = append(r.wakes, appKey{Namespace: ns, Name: name})
		}
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if !ok || m["type"] != routingv1alpha1.ConditionIdle {
			continue
		}
		var cond metav1.Condition
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &cond); err == nil {
			r.idle = &cond
		}
		break
	}
	return r, nil
}

// routes is the scaler's one watch of its instance's AppRoutes, in every
// namespace: the ask path (routeCheck) and the Idle condition (idleStatus)
// read it, so neither asks the API server.
type routes struct {
	inf cache.SharedIndexInformer
}

func newRoutes(dyn dynamic.Interface, names groupsuffix.Names) *routes {
	inf := dynamicinformer.NewFilteredDynamicInformer(dyn, routingv1alpha1.GroupVersionResource(names.Group()), metav1.NamespaceAll, 0,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc, wakesIndex: wakesIndexFunc}, nil).Informer()
	_ = inf.SetTransform(slimRoute) // fails only once started
	return &routes{inf: inf}
}

func (r *routes) run(ctx context.Context) { r.inf.Run(ctx.Done()) }

// synced reports whether the cache holds every AppRoute (false while the
// first list has not ended, and for good when the CRD is not installed).
func (r *routes) synced() bool { return r != nil && r.inf.HasSynced() }

// get returns the AppRoute named k, or nil.
func (r *routes) get(k appKey) *route {
	obj, ok, _ := r.inf.GetIndexer().GetByKey(k.Namespace + "/" + k.Name)
	if !ok {
		return nil
	}
	rt, _ := obj.(*route)
	return rt
}

// namesIn returns the names of the AppRoutes of namespace ns, sorted.
func (r *routes) namesIn(ns string) []string {
	objs, _ := r.inf.GetIndexer().ByIndex(cache.NamespaceIndex, ns)
	out := make([]string, 0, len(objs))
	for _, o := range objs {
		if rt, ok := o.(*route); ok {
			out = append(out, rt.Name)
		}
	}
	sort.Strings(out)
	return out
}

// routeCheck tells a ScaledObject whose app names no AppRoute (app:
// hello-typo) from one whose app is merely at zero: both have no pod, but
// the first would never wake. It answers from the AppRoute cache: an ask
// costs the API server nothing.
type routeCheck struct {
	routes *routes // nil: no check (tests with a fake clientset)
	names  groupsuffix.Names
	log    logr.Logger
}

func newRouteCheck(r *routes, names groupsuffix.Names, log logr.Logger) *routeCheck {
	return &routeCheck{routes: r, names: names, log: log}
}

// check returns an InvalidArgument error when k's namespace has no AppRoute
// named k.Name, naming the AppRoutes it has. When it cannot tell (the cache
// is not synced yet, the CRD is not installed) it lets the app through: a
// wrong refusal would stop a working app from scaling.
func (c *routeCheck) check(k appKey) error {
	if c == nil || c.routes == nil {
		return nil
	}
	if !c.routes.synced() {
		c.log.V(1).Info("AppRoutes not listed yet (or their CRD is not installed); answering for the app", "namespace", k.Namespace, "app", k.Name)
		return nil
	}
	if c.routes.get(k) != nil {
		return nil
	}
	known := c.routes.namesIn(k.Namespace)
	if len(known) == 0 {
		return status.Errorf(codes.InvalidArgument, "app %q: namespace %s has no AppRoute of ebb instance %s: label the namespace %s=%s and the workload's pod template %s=%s",
			k.Name, k.Namespace, c.names.Suffix(), c.names.InjectLabel(), groupsuffix.InjectEnabled, c.names.AppLabel(), k.Name)
	}
	return status.Errorf(codes.InvalidArgument, "app %q: no AppRoute %s in namespace %s (the app is the pod template's label %s); its apps are: %s",
		k.Name, k.Name, k.Namespace, c.names.AppLabel(), strings.Join(known, ", "))
}
