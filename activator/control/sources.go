package control

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ebb-dev/ebb/activator/proxy"
	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/internal/routing"
	"github.com/ebb-dev/ebb/internal/staticanswer"
	"github.com/ebb-dev/ebb/internal/workload"
)

// PlaceholderAnnotation (<suffix>/placeholder: "true" on an AppRoute, which
// the webhook copies from the pod template) turns on the built-in
// placeholder page for browsers during a cold start; an AppRoute's
// spec.placeholder (from its RoutePolicy) is a page of the route's own,
// served in its place.
const PlaceholderAnnotation = "placeholder"

const byService = "service"

// sources feeds the Router from the API: the routing table from
// AppRoutes and Services, each app's endpoints from its Service's
// EndpointSlices, and the scaler addresses. It is the routing-table
// controller of every replica (see Reconcile); the elected replica's
// controllers read the same cache through it.
type sources struct {
	cfg    Config
	names  groupsuffix.Names
	log    logr.Logger
	router Table
	cache  client.Reader // the manager's cache
	api    client.Reader // the API server, for the full re-list

	onScalers func([]string)
	lastList  atomic.Int64 // unix nanos of the last successful full list
	// lastContact is when the API server last answered a probe (unix
	// nanos); probing is set while one is in flight, probes counts them
	// (tests wait for them), now is time.Now or a test's clock.
	lastContact atomic.Int64
	probing     atomic.Bool
	probes      sync.WaitGroup
	now         func() time.Time

	mu       sync.Mutex // one rebuild at a time: the table swap and onScalers are single-writer
	nextList time.Time
	claims   routing.Claims                // the DomainClaims last listed (under mu)
	built    map[routing.Key]compiledRoute // under mu
	// noFallback is why each route's fallback is not used, as last
	// logged (under mu): a reason is logged when it changes, not at
	// every rebuild.
	noFallback map[routing.Key]string
}

// indexSlicesByService lets the cache list a Service's EndpointSlices.
func indexSlicesByService(ctx context.Context, mgr ctrl.Manager) error {
	return mgr.GetFieldIndexer().IndexField(ctx, &discoveryv1.EndpointSlice{}, byService, func(o client.Object) []string {
		if svc := o.GetLabels()[discoveryv1.LabelServiceName]; svc != "" {
			return []string{o.GetNamespace() + "/" + svc}
		}
		return nil
	})
}

// Reconcile rebuilds the whole table, whatever changed: from the cache on
// every change, and from a full re-list of AppRoutes from the API server
// every Resync, so that a broken watch converges within one period.
func (s *sources) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if now := time.Now(); !now.Before(s.nextList) {
		s.nextList = now.Add(s.cfg.Resync)
		s.relist(ctx)
	} else {
		s.rebuild(ctx, s.cachedRoutes(ctx))
	}
	return reconcile.Result{RequeueAfter: time.Until(s.nextList)}, nil
}

func (s *sources) relist(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var list routingv1alpha1.AppRouteList
	if err := s.api.List(ctx, &list); err != nil {
		s.log.Error(err, "full re-list of AppRoutes failed; serving the watched table")
		return
	}
	routes := make([]*routingv1alpha1.AppRoute, len(list.Items))
	for i := range list.Items {
		routes[i] = &list.Items[i]
	}
	s.lastList.Store(s.clock().UnixNano())
	s.rebuild(ctx, routes)
}

// synced reports whether the table is fresh: a full list succeeded within
// three resync periods, and the API server answered within apiSilence.
// The watches are quiet on an idle cluster, so the API server's answers
// are sought: a probe (a GET of this replica's pod) whenever the last
// answer is older than apiProbe, started by the readiness probe's call
// and answered off it; any answer counts, an error status too. A replica
// cut off from the API server, its table frozen, so turns NotReady after
// apiSilence (and the kubelet's next probes), not three resync periods:
// the kubelet, on the API server's side, reports it, and the hand-off
// slices and the Services stop sending it clients.
func (s *sources) synced() bool {
	last := s.lastList.Load()
	if last == 0 {
		return false
	}
	now := s.clock()
	if now.Sub(time.Unix(0, last)) >= 3*s.cfg.Resync {
		return false
	}
	if s.api == nil {
		return true
	}
	contact := max(last, s.lastContact.Load())
	if now.Sub(time.Unix(0, contact)) >= apiProbe && s.probing.CompareAndSwap(false, true) {
		s.probes.Go(func() {
			defer s.probing.Store(false)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err := s.api.Get(ctx, types.NamespacedName{Namespace: s.cfg.PodNamespace, Name: s.cfg.PodName}, &corev1.Pod{})
			var status apierrors.APIStatus
			if err == nil || errors.As(err, &status) {
				s.lastContact.Store(s.clock().UnixNano())
				return
			}
			s.log.Info("the API server did not answer", "err", err.Error())
		})
	}
	return now.Sub(time.Unix(0, contact)) < apiSilence
}

// apiProbe is the age of the API server's last answer past which
// readiness asks it again (a GET of the replica's pod: at most one every
// 10 s per replica, while the kubelet probes it); apiSilence the age past
// which the replica is not ready.
const (
	apiProbe   = 10 * time.Second
	apiSilence = 30 * time.Second
)

// clock is time.Now, or a test's.
func (s *sources) clock() time.Time {
	if s.now != nil {
		return s.now()
	}
	return time.Now()
}

// cachedRoutes lists the AppRoutes in the cache. They are the cache's own
// objects: read them, never change them.
func (s *sources) cachedRoutes(ctx context.Context) []*routingv1alpha1.AppRoute {
	var list routingv1alpha1.AppRouteList
	if err := s.cache.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		s.log.Error(err, "list AppRoutes from the cache")
		return nil
	}
	out := make([]*routingv1alpha1.AppRoute, len(list.Items))
	for i := range list.Items {
		out[i] = &list.Items[i]
	}
	return out
}

// domainClaims are the DomainClaims in the cache: domain → namespace. On a
// failed list the last claims listed stay in force: a binding must not lapse
// because a read failed.
func (s *sources) domainClaims(ctx context.Context) routing.Claims {
	var list routingv1alpha1.DomainClaimList
	if err := s.cache.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		s.log.Error(err, "list DomainClaims from the cache; the last ones listed stay in force")
		return s.claims
	}
	claims := make(routing.Claims, len(list.Items))
	for _, c := range list.Items {
		claims[c.Name] = c.Spec.Namespace
	}
	s.claims = claims
	return claims
}

func (s *sources) service(ctx context.Context, ns, name string) *corev1.Service {
	var svc corev1.Service
	if err := s.cache.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &svc); err != nil {
		return nil
	}
	return &svc
}

// slicesOf lists the EndpointSlices of the Service ns/name in the cache (its
// own objects: read only).
func (s *sources) slicesOf(ctx context.Context, ns, name string) []discoveryv1.EndpointSlice {
	var list discoveryv1.EndpointSliceList
	if err := s.cache.List(ctx, &list, client.MatchingFields{byService: ns + "/" + name}, client.UnsafeDisableDeepCopy); err != nil {
		s.log.Error(err, "list EndpointSlices from the cache", "service", ns+"/"+name)
		return nil
	}
	return list.Items
}

// activatorPods lists this instance's activator pods (the cache holds only
// those): read only.
func (s *sources) activatorPods(ctx context.Context) ([]corev1.Pod, error) {
	sel, err := labels.Parse(s.cfg.ActivatorSelector)
	if err != nil {
		return nil, fmt.Errorf("--activator-selector: %w", err)
	}
	var list corev1.PodList
	if err := s.cache.List(ctx, &list, client.InNamespace(s.cfg.PodNamespace), client.MatchingLabelsSelector{Selector: sel}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list activator pods: %w", err)
	}
	return list.Items, nil
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

// isHandoff tells slices published by any activator instance: an activator
// never forwards to an activator.
func isHandoff(sl *discoveryv1.EndpointSlice) bool {
	return strings.HasPrefix(sl.Labels[discoveryv1.LabelManagedBy], "activator.")
}

func (s *sources) rebuild(ctx context.Context, routes []*routingv1alpha1.AppRoute) {
	table := make([]routing.Route[proxy.AppConfig], 0, len(routes))
	type appEps struct {
		key routing.Key
		eps []proxy.Endpoint
	}
	var endpoints []appEps
	appServices := make(map[types.NamespacedName]bool, len(routes))
	for _, r := range routes {
		appServices[types.NamespacedName{Namespace: r.Namespace, Name: r.Spec.Service.Name}] = true
	}
	for _, r := range routes {
		key := routing.Key{Namespace: r.Namespace, Name: r.Name}
		rt := routing.Route[proxy.AppConfig]{
			Key: key, Generation: r.Generation, Created: r.CreationTimestamp.Time,
			Hosts: r.Spec.Hosts, PathPrefixes: r.Spec.PathPrefixes, HostPaths: hostPaths(r.Spec.HostPaths), Service: r.Spec.Service.Name,
			Value: proxy.AppConfig{QueueSize: int(r.Spec.QueueSize), Placeholder: r.Annotations[s.names.Key(PlaceholderAnnotation)] == "true", Concurrency: r.Spec.Concurrency},
		}
		if r.Spec.ColdStartTimeout != nil {
			rt.Value.ColdStartTimeout = r.Spec.ColdStartTimeout.Duration
		}
		for d, v := range map[*time.Duration]*metav1.Duration{&rt.Value.Timeouts.Request: r.Spec.RequestTimeout, &rt.Value.Timeouts.ResponseHeader: r.Spec.ResponseHeaderTimeout, &rt.Value.Timeouts.StreamIdle: r.Spec.StreamIdleTimeout} {
			if v != nil {
				*d = v.Duration
			}
		}
		rt.Value.Static, rt.Value.Page = s.compiled(r)
		rt.Value.Wakes = wakesOf(r)
		if f := r.Spec.Fallback; f != nil && f.Name != "" {
			if why := s.fallbackLoops(ctx, r, appServices); why != "" {
				s.refuseFallback(key, why)
			} else {
				s.refuseFallback(key, "")
				rt.Value.Fallback = s.fallbackAddr(ctx, r.Namespace, f)
			}
		}
		if ref := r.Spec.ScaleTargetRef; ref.Name != "" {
			rt.Value.Deployment = workload.KeyOf(ref.APIVersion, ref.Kind, ref.Name)
		}
		var eps []proxy.Endpoint
		if svc := s.service(ctx, r.Namespace, r.Spec.Service.Name); svc != nil && r.Spec.Service.Name != "" {
			rt.ClusterIPs = svc.Spec.ClusterIPs
			eps = s.endpoints(ctx, svc, routePorts(svc, r.Spec.Service.Port))
		}
		table = append(table, rt)
		endpoints = append(endpoints, appEps{key, eps})
	}
	if len(s.built) > 0 {
		live := make(map[routing.Key]bool, len(table))
		for _, r := range table {
			live[r.Key] = true
		}
		for k := range s.built {
			if !live[k] {
				delete(s.built, k)
			}
		}
		for k := range s.noFallback {
			if !live[k] {
				delete(s.noFallback, k)
			}
		}
	}
	// Endpoints first, so a new route never answers from an empty set it
	// already has endpoints for.
	for _, e := range endpoints {
		s.router.SetEndpoints(e.key, e.eps)
	}
	s.router.SetRoutes(table, s.domainClaims(ctx))
	if s.onScalers != nil && s.cfg.ScalerService != "" {
		s.onScalers(s.scalerAddresses(ctx))
	}
}

// fallbackLoops says why r's fallback would lead a request back to an
// activator, from what the caches know: the fallback is the app's own
// Service, another app's of this instance (appServices), or a Service
// with a hand-off slice of any instance (an app at zero). "" if none of
// these. (A loop the caches cannot see is cut by the hop header: see
// proxy.FallbackHopHeader.)
func (s *sources) fallbackLoops(ctx context.Context, r *routingv1alpha1.AppRoute, appServices map[types.NamespacedName]bool) string {
	name := r.Spec.Fallback.Name
	switch {
	case name == r.Spec.Service.Name:
		return "the fallback is the app's own Service: its traffic goes to an activator while the app has no ready pod"
	case appServices[types.NamespacedName{Namespace: r.Namespace, Name: name}]:
		return "the fallback is the Service of another app ebb routes: its traffic goes to an activator while that app has no ready pod"
	}
	for i, sls := 0, s.slicesOf(ctx, r.Namespace, name); i < len(sls); i++ {
		if isHandoff(&sls[i]) {
			return "the fallback Service has an activator's hand-off slice: its traffic goes to an activator"
		}
	}
	return ""
}

// refuseFallback notes why the fallback of route key is not used ("" when
// it is), and logs it when that changed.
func (s *sources) refuseFallback(key routing.Key, why string) {
	if s.noFallback[key] == why {
		return
	}
	if why == "" {
		delete(s.noFallback, key)
		return
	}
	if s.noFallback == nil {
		s.noFallback = map[routing.Key]string{}
	}
	s.noFallback[key] = why
	s.log.Info("fallback not used: held requests get no fallback", "route", key.String(), "reason", why)
}

// compiledRoute is what sources builds from an AppRoute's spec once per
// generation of one object (its UID: an AppRoute deleted and made again
// under its name starts at generation 1 again), so that an unchanged
// route keeps the same pointers (the Router compares AppConfigs whole).
type compiledRoute struct {
	uid        types.UID
	generation int64
	static     *staticanswer.Set
	page       *proxy.Page
}

// compiled returns r's static responses and placeholder page, built once
// per generation of r (of its UID). Rules the webhook let through but Compile refuses
// are logged and left out (admission refuses them first).
func (s *sources) compiled(r *routingv1alpha1.AppRoute) (*staticanswer.Set, *proxy.Page) {
	key := routing.Key{Namespace: r.Namespace, Name: r.Name}
	if c, ok := s.built[key]; ok && c.uid == r.UID && c.generation == r.Generation {
		return c.static, c.page
	}
	c := compiledRoute{uid: r.UID, generation: r.Generation}
	if len(r.Spec.StaticResponses) > 0 {
		set, err := staticanswer.Compile(StaticRules(r.Spec.StaticResponses))
		if err != nil {
			s.log.Error(err, "static responses of an AppRoute refused; the route serves without them", "route", key.String())
		} else {
			c.static = set
		}
	}
	if p := r.Spec.Placeholder; p != nil {
		fields := make([][2]string, len(p.Headers))
		for i, h := range p.Headers {
			fields[i] = [2]string{h.Name, h.Value}
		}
		page, err := proxy.NewPage(int(cmp.Or(p.Status, 503)), fields, p.Body)
		if err != nil {
			s.log.Error(err, "placeholder page of an AppRoute refused; the route serves without it", "route", key.String())
		}
		c.page = page
	}
	if s.built == nil {
		s.built = map[routing.Key]compiledRoute{}
	}
	s.built[key] = c
	return c.static, c.page
}

// StaticRules converts an AppRoute's static responses into
// staticanswer's rules.
func StaticRules(in []routingv1alpha1.StaticResponse) []staticanswer.Rule {
	out := make([]staticanswer.Rule, len(in))
	for i, sr := range in {
		r := staticanswer.Rule{Name: sr.Name, When: sr.When, Method: sr.Match.Method, Status: int(sr.Response.Status), Body: sr.Response.Body}
		if p := sr.Match.Path; p != nil {
			r.PathType, r.Path = p.Type, p.Value
		}
		for _, h := range sr.Match.Headers {
			r.Headers = append(r.Headers, staticanswer.Header{Name: h.Name, Value: h.Value})
		}
		for _, h := range sr.Response.Headers {
			r.ResponseHeaders = append(r.ResponseHeaders, staticanswer.Header{Name: h.Name, Value: h.Value})
		}
		out[i] = r
	}
	return out
}

// fallbackAddr is ClusterIP:port of the fallback Service ref in ns: the
// port ref names, or the Service's first TCP port; "" (logged) when the
// Service is not in the cache, is headless or has no such port.
func (s *sources) fallbackAddr(ctx context.Context, ns string, ref *routingv1alpha1.ServiceReference) string {
	svc := s.service(ctx, ns, ref.Name)
	if svc == nil || svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == corev1.ClusterIPNone {
		s.log.V(1).Info("fallback Service not found or headless; held requests get no fallback", "namespace", ns, "service", ref.Name)
		return ""
	}
	ports := routePorts(svc, ref.Port)
	if len(ports) == 0 {
		s.log.V(1).Info("fallback Service has no such TCP port; held requests get no fallback", "namespace", ns, "service", ref.Name, "port", ref.Port)
		return ""
	}
	return net.JoinHostPort(svc.Spec.ClusterIP, strconv.Itoa(int(ports[0].Port)))
}

// endpoints lists the app endpoints of svc behind the first of ports (the
// sidecar's data port), leaving out every activator's hand-off slices.
func (s *sources) endpoints(ctx context.Context, svc *corev1.Service, ports []corev1.ServicePort) []proxy.Endpoint {
	if len(ports) == 0 {
		return nil
	}
	var out []proxy.Endpoint
	seen := map[string]bool{}
	sls := s.slicesOf(ctx, svc.Namespace, svc.Name)
	for i := range sls {
		sl := &sls[i]
		if isHandoff(sl) || sl.AddressType == discoveryv1.AddressTypeFQDN {
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
			out = append(out, proxy.Endpoint{
				Addr:      addr,
				AdminAddr: net.JoinHostPort(e.Addresses[0], strconv.Itoa(s.cfg.SidecarAdminPort)),
				Ready:     ptr.Deref(e.Conditions.Ready, true),
			})
		}
	}
	slices.SortFunc(out, func(a, b proxy.Endpoint) int { return strings.Compare(a.Addr, b.Addr) })
	return out
}

// scalerAddresses are the ready endpoints of --scaler-service.
func (s *sources) scalerAddresses(ctx context.Context) []string {
	ns, name, port, _ := ParseServiceRef(s.cfg.ScalerService)
	var out []string
	for _, sl := range s.slicesOf(ctx, ns, name) {
		if isHandoff(&sl) {
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
