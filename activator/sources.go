package activator

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/ebb-dev/ebb/activator/routing"
	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/groupsuffix"
)

// PlaceholderAnnotation (<suffix>/placeholder: "true" on an AppRoute) turns
// on the placeholder page for browsers during a cold start. The AppRoute has
// no spec field for it yet.
const PlaceholderAnnotation = "placeholder"

const byService = "service"

// sources feeds the Router from the API: the routing table from
// AppRoutes and Services, each app's endpoints from its Service's
// EndpointSlices, and the scaler addresses.
type sources struct {
	opts  Options
	names groupsuffix.Names
	log   logr.Logger
	dp    *Router
	dyn   dynamic.Interface
	kube  kubernetes.Interface

	factory  informers.SharedInformerFactory
	routes   cache.SharedIndexInformer
	services cache.SharedIndexInformer
	slices   cache.SharedIndexInformer

	onScalers func([]string)
	kick      chan struct{}
	lastList  atomic.Int64 // unix nanos of the last successful full list
}

func newSources(opts Options, names groupsuffix.Names, log logr.Logger, kube kubernetes.Interface, dyn dynamic.Interface, factory informers.SharedInformerFactory, routes cache.SharedIndexInformer, dp *Router) (*sources, error) {
	s := &sources{opts: opts, names: names, log: log, dp: dp, dyn: dyn, kube: kube, factory: factory, routes: routes, kick: make(chan struct{}, 1)}
	s.services = factory.Core().V1().Services().Informer()
	s.slices = factory.Discovery().V1().EndpointSlices().Informer()
	if err := s.slices.AddIndexers(cache.Indexers{byService: func(obj any) ([]string, error) {
		sl, ok := obj.(*discoveryv1.EndpointSlice)
		if !ok || sl.Labels[discoveryv1.LabelServiceName] == "" {
			return nil, nil
		}
		return []string{sl.Namespace + "/" + sl.Labels[discoveryv1.LabelServiceName]}, nil
	}}); err != nil {
		return nil, fmt.Errorf("index EndpointSlices: %w", err)
	}
	h := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { s.trigger() },
		UpdateFunc: func(any, any) { s.trigger() },
		DeleteFunc: func(any) { s.trigger() },
	}
	for _, inf := range []cache.SharedIndexInformer{s.routes, s.services, s.slices} {
		if _, err := inf.AddEventHandler(h); err != nil {
			return nil, fmt.Errorf("watch: %w", err)
		}
	}
	return s, nil
}

func (s *sources) trigger() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// run rebuilds on every change (coalesced) and re-lists AppRoutes from the
// API server every Resync, so a broken watch converges within one period.
func (s *sources) run(ctx context.Context) {
	resync := time.NewTicker(s.opts.Resync)
	defer resync.Stop()
	s.relist(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
			s.rebuild(s.cachedRoutes())
		case <-resync.C:
			s.relist(ctx)
		}
	}
}

func (s *sources) relist(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	list, err := s.dyn.Resource(routingv1alpha1.GroupVersionResource(s.names.Group())).List(ctx, metav1.ListOptions{})
	if err != nil {
		s.log.Error(err, "full re-list of AppRoutes failed; serving the watched table")
		return
	}
	routes := make([]*routingv1alpha1.AppRoute, 0, len(list.Items))
	for i := range list.Items {
		if r, err := toAppRoute(&list.Items[i]); err == nil {
			routes = append(routes, r)
		}
	}
	s.lastList.Store(time.Now().UnixNano())
	s.rebuild(routes)
}

// synced reports whether the table is fresh: a full list succeeded within
// three resync periods.
func (s *sources) synced() bool {
	last := s.lastList.Load()
	return last != 0 && time.Since(time.Unix(0, last)) < 3*s.opts.Resync
}

func (s *sources) cachedRoutes() []*routingv1alpha1.AppRoute {
	objs := s.routes.GetStore().List()
	out := make([]*routingv1alpha1.AppRoute, 0, len(objs))
	for _, o := range objs {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		if r, err := toAppRoute(u); err == nil {
			out = append(out, r)
		} else {
			s.log.V(1).Info("skipping an AppRoute that does not decode", "namespace", u.GetNamespace(), "name", u.GetName(), "error", err.Error())
		}
	}
	return out
}

func toAppRoute(u *unstructured.Unstructured) (*routingv1alpha1.AppRoute, error) {
	r := &routingv1alpha1.AppRoute{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, r); err != nil {
		return nil, fmt.Errorf("decode AppRoute %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	return r, nil
}

func (s *sources) service(ns, name string) *corev1.Service {
	o, ok, _ := s.services.GetStore().GetByKey(ns + "/" + name)
	if !ok {
		return nil
	}
	svc, _ := o.(*corev1.Service)
	return svc
}

// routePorts are the Service ports that carry an AppRoute's traffic: the one
// it names, or every TCP port.
func routePorts(svc *corev1.Service, port int32) []corev1.ServicePort {
	var out []corev1.ServicePort
	for _, p := range svc.Spec.Ports {
		if p.Protocol != "" && p.Protocol != corev1.ProtocolTCP {
			continue
		}
		if port == 0 || p.Port == port {
			out = append(out, p)
		}
	}
	return out
}

// isHandoff tells slices published by any activator instance: an activator
// never forwards to an activator.
func isHandoff(sl *discoveryv1.EndpointSlice) bool {
	return strings.HasPrefix(sl.Labels[discoveryv1.LabelManagedBy], "activator.")
}

func (s *sources) rebuild(routes []*routingv1alpha1.AppRoute) {
	table := make([]routing.Route[AppConfig], 0, len(routes))
	type appEps struct {
		key routing.Key
		eps []Endpoint
	}
	var endpoints []appEps
	for _, r := range routes {
		key := routing.Key{Namespace: r.Namespace, Name: r.Name}
		rt := routing.Route[AppConfig]{
			Key: key, Generation: r.Generation, Created: r.CreationTimestamp.Time,
			Hosts: r.Spec.Hosts, PathPrefixes: r.Spec.PathPrefixes, Service: r.Spec.Service.Name,
			Value: AppConfig{QueueSize: int(r.Spec.QueueSize), Placeholder: r.Annotations[s.names.Key(PlaceholderAnnotation)] == "true"},
		}
		if r.Spec.ColdStartTimeout != nil {
			rt.Value.ColdStartTimeout = r.Spec.ColdStartTimeout.Duration
		}
		var eps []Endpoint
		if svc := s.service(r.Namespace, r.Spec.Service.Name); svc != nil && r.Spec.Service.Name != "" {
			rt.ClusterIPs = svc.Spec.ClusterIPs
			eps = s.endpoints(svc, routePorts(svc, r.Spec.Service.Port))
		}
		table = append(table, rt)
		endpoints = append(endpoints, appEps{key, eps})
	}
	// Endpoints first, so a new route never answers from an empty set it
	// already has endpoints for.
	for _, e := range endpoints {
		s.dp.SetEndpoints(e.key, e.eps)
	}
	s.dp.SetRoutes(table)
	if s.onScalers != nil && s.opts.ScalerService != "" {
		s.onScalers(s.scalerAddresses())
	}
}

// endpoints lists the app endpoints of svc behind the first of ports (the
// sidecar's data port), leaving out every activator's hand-off slices.
func (s *sources) endpoints(svc *corev1.Service, ports []corev1.ServicePort) []Endpoint {
	if len(ports) == 0 {
		return nil
	}
	objs, _ := s.slices.GetIndexer().ByIndex(byService, svc.Namespace+"/"+svc.Name)
	var out []Endpoint
	seen := map[string]bool{}
	for _, o := range objs {
		sl, ok := o.(*discoveryv1.EndpointSlice)
		if !ok || isHandoff(sl) || sl.AddressType == discoveryv1.AddressTypeFQDN {
			continue
		}
		port := int32(0)
		for _, p := range sl.Ports {
			if p.Port != nil && ptr.Deref(p.Name, "") == ports[0].Name {
				port = *p.Port
			}
		}
		if port == 0 {
			continue
		}
		for _, e := range sl.Endpoints {
			if len(e.Addresses) == 0 {
				continue
			}
			addr := net.JoinHostPort(e.Addresses[0], strconv.Itoa(int(port)))
			if seen[addr] {
				continue
			}
			seen[addr] = true
			terminating := ptr.Deref(e.Conditions.Terminating, false)
			if terminating {
				continue // a draining pod takes no new request
			}
			out = append(out, Endpoint{
				Addr:      addr,
				AdminAddr: net.JoinHostPort(e.Addresses[0], strconv.Itoa(s.opts.SidecarAdminPort)),
				Ready:     ptr.Deref(e.Conditions.Ready, true),
			})
		}
	}
	slices.SortFunc(out, func(a, b Endpoint) int { return strings.Compare(a.Addr, b.Addr) })
	return out
}

// scalerAddresses are the ready endpoints of --scaler-service.
func (s *sources) scalerAddresses() []string {
	ns, name, port, _ := parseServiceRef(s.opts.ScalerService)
	objs, _ := s.slices.GetIndexer().ByIndex(byService, ns+"/"+name)
	var out []string
	for _, o := range objs {
		sl, ok := o.(*discoveryv1.EndpointSlice)
		if !ok || isHandoff(sl) {
			continue
		}
		for _, p := range sl.Ports {
			if p.Port == nil || (ptr.Deref(p.Name, "") != port && strconv.Itoa(int(*p.Port)) != port) {
				continue
			}
			for _, e := range sl.Endpoints {
				if len(e.Addresses) > 0 && ptr.Deref(e.Conditions.Ready, true) {
					out = append(out, net.JoinHostPort(e.Addresses[0], strconv.Itoa(int(*p.Port))))
				}
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
