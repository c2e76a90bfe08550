package control

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/internal/workload"
)

// FieldManager is the activator's server-side apply field manager, for
// hand-off EndpointSlices and the Propagated condition.
const FieldManager = "ebb-activator"

// RouteLabel on a hand-off slice names the AppRoute it is for.
const RouteLabel = "approute"

// handoff is the endpoint hand-off controller, run by the elected replica:
// for each AppRoute whose app may go to zero (Idle), whose Deployment is
// scaled to 0, or which has no ready endpoint, it publishes an extra
// EndpointSlice for the app's Service that points at the ready activator
// pods; it removes it once the app has a ready endpoint and is not idle.
// It only ever touches slices managed by activator.<suffix>.
type handoff struct {
	cfg       Config
	names     groupsuffix.Names
	log       logr.Logger
	kube      kubernetes.Interface
	src       *sources        // and its cache: Deployments, this pool's activator pods
	mapper    meta.RESTMapper // the cache's: resolves the --scale-targets kinds
	bind      *binder
	published prometheus.Gauge // MetricHandoffSlices

	mu sync.Mutex // one reconcileAll at a time
	// handingOver: since when a slice of this pool has been kept for a
	// route another pool now admits, until that pool's slice can serve.
	handingOver map[string]time.Time
	// backoff spaces the writes of a slice whose last write failed.
	backoff writeBackoff
	now     func() time.Time // time.Now; a test's clock
}

// handoverGrace bounds how long a pool keeps the hand-off slice of a route
// another pool now admits, waiting for that pool's own slice to have a
// ready activator.
const handoverGrace = 30 * time.Second

// Reconcile publishes or removes every hand-off slice at once, on each
// change and every 10 s; a slice whose write failed is written again when
// its back-off has passed (1 s, doubling up to 30 s), not on every change.
func (h *handoff) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	err := h.reconcileAll(ctx)
	if err != nil {
		h.log.Error(err, "endpoint hand-off: some slices not reconciled; retrying")
	}
	after := 10 * time.Second
	if next, ok := h.backoff.next(); ok {
		after = min(after, max(next.Sub(h.clock()), 10*time.Millisecond))
	} else if err != nil {
		after = time.Second
	}
	return reconcile.Result{RequeueAfter: after}, nil
}

func (h *handoff) clock() time.Time {
	if h.now != nil {
		return h.now()
	}
	return time.Now()
}

func (h *handoff) reconcileAll(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	// Without the pools' selectors no route's pool is known: leave every
	// slice as it is rather than take them all down.
	if ps, err := h.bind.current(ctx); len(ps) == 0 {
		return fmt.Errorf("no activator pools known, hand-off slices left as they are: %w", err)
	}
	routes := h.src.cachedRoutes(ctx)
	wanted := map[string]bool{} // namespace/slice name
	var errs []error
	for _, r := range routes {
		name, err := h.reconcile(ctx, r)
		if err != nil {
			errs = append(errs, err)
		}
		if name != "" {
			wanted[r.Namespace+"/"+name] = true
		}
	}
	h.backoff.keep(wanted)
	// Our slices whose AppRoute is gone or no longer wants one.
	published := 0
	var ours discoveryv1.EndpointSliceList
	if err := h.src.cache.List(ctx, &ours, client.MatchingLabels{discoveryv1.LabelManagedBy: h.names.EndpointSliceManagedBy()}, client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("list hand-off slices: %w", err)
	}
	over := map[string]time.Time{}
	for i := range ours.Items {
		sl := &ours.Items[i]
		if !h.ownSlice(sl) {
			continue
		}
		key := sl.Namespace + "/" + sl.Name
		if wanted[key] {
			published++
			continue
		}
		why := "no AppRoute needs it"
		if to := h.movedTo(ctx, sl); to != "" {
			since, ok := h.handingOver[key]
			if !ok {
				since = time.Now()
			}
			if !h.otherPoolServes(ctx, sl) && time.Since(since) < handoverGrace {
				over[key] = since
				published++
				continue // make before break: kept until pool `to` can serve
			}
			why = "the route moved to activator pool " + to
		}
		if err := h.delete(ctx, sl, why); err != nil {
			errs = append(errs, err)
		}
	}
	h.handingOver = over
	h.published.Set(float64(published))
	return errors.Join(errs...)
}

// reconcile publishes the hand-off slice of r when needed; it returns the
// slice's name when it should exist.
func (h *handoff) reconcile(ctx context.Context, r *routingv1alpha1.AppRoute) (string, error) {
	if r.DeletionTimestamp != nil || r.Spec.Service.Name == "" {
		return "", nil
	}
	svc := h.src.service(ctx, r.Namespace, r.Spec.Service.Name)
	if svc == nil || svc.Spec.Type == corev1.ServiceTypeExternalName {
		return "", nil
	}
	ports := routePorts(svc, r.Spec.Service.Port)
	if len(ports) == 0 {
		return "", nil
	}
	why := h.needsHandoff(ctx, r, svc)
	if why == "" {
		return "", nil
	}
	if pool, _ := h.bind.admit(ctx, r); pool != h.cfg.Pool {
		return "", nil
	}
	name := poolSliceName(svc.Name, h.names, h.cfg.Pool)
	want, err := h.desired(ctx, r, svc, ports, name)
	if err != nil {
		return name, err
	}
	if cur, ok := h.current(ctx, r.Namespace, name); ok && sameSlice(cur, want) {
		h.backoff.succeeded(r.Namespace + "/" + name)
		return name, nil
	}
	body, err := json.Marshal(want)
	if err != nil {
		return name, fmt.Errorf("encode hand-off slice %s/%s: %w", r.Namespace, name, err)
	}
	key, sum, now := r.Namespace+"/"+name, bodyHash(body), h.clock()
	if !h.backoff.due(key, sum, now) {
		return name, nil // this body's last write failed: tried again when its back-off has passed
	}
	force := true
	_, err = h.kube.DiscoveryV1().EndpointSlices(r.Namespace).Patch(ctx, name, types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: FieldManager, Force: &force})
	if err != nil {
		wait := h.backoff.failed(key, sum, now)
		return name, fmt.Errorf("apply hand-off slice %s/%s (next try in %v): %w", r.Namespace, name, wait, err)
	}
	h.backoff.succeeded(key)
	h.log.Info("hand-off slice published", "namespace", r.Namespace, "service", svc.Name, "slice", name, "activators", len(want.Endpoints), "why", why)
	return name, nil
}

// ownSlice reports whether sl, a hand-off slice of the instance, is this
// pool's: labelled with it (every hand-off slice carries its pool's label).
func (h *handoff) ownSlice(sl *discoveryv1.EndpointSlice) bool {
	return sl.Labels[h.names.Key(PoolLabel)] == h.cfg.Pool
}

// movedTo returns the pool that now admits the route of sl, this pool's
// slice, when the route still needs a hand-off there; else "".
func (h *handoff) movedTo(ctx context.Context, sl *discoveryv1.EndpointSlice) string {
	var r routingv1alpha1.AppRoute
	if err := h.src.cache.Get(ctx, types.NamespacedName{Namespace: sl.Namespace, Name: sl.Labels[h.names.Key(RouteLabel)]}, &r); err != nil || r.DeletionTimestamp != nil {
		return ""
	}
	pool, _ := h.bind.admit(ctx, &r)
	if pool == "" || pool == h.cfg.Pool {
		return ""
	}
	svc := h.src.service(ctx, r.Namespace, r.Spec.Service.Name)
	if svc == nil || h.needsHandoff(ctx, &r, svc) == "" {
		return ""
	}
	return pool
}

// otherPoolServes reports whether another pool of the instance has a
// hand-off slice for sl's Service with a ready activator in it.
func (h *handoff) otherPoolServes(ctx context.Context, sl *discoveryv1.EndpointSlice) bool {
	for _, o := range h.src.slicesOf(ctx, sl.Namespace, sl.Labels[discoveryv1.LabelServiceName]) {
		if o.Labels[discoveryv1.LabelManagedBy] != h.names.EndpointSliceManagedBy() || h.ownSlice(&o) {
			continue
		}
		for _, e := range o.Endpoints {
			if ptr.Deref(e.Conditions.Ready, true) {
				return true
			}
		}
	}
	return false
}

// needsHandoff says why r's Service needs the hand-off slice, or "" when
// it does not: the app may go to zero (mayGoToZero), the Deployment is
// scaled to 0, or no app endpoint is ready and not terminating.
//
// The first is what keeps a request from falling between the last pod and
// the activators at 1 → 0 (or N → 0): the slice is in every consumer's
// configuration a cooldownPeriod before KEDA writes replicas=0. Published
// only at replicas=0, it came 30–50 ms after the EndpointSlice controller
// had made the last endpoint terminating; kube-proxy falls back to
// terminating endpoints, but an ingress controller that drops them (Traefik)
// had no server for the app until it applied the slice, 2 s later.
//
// A headless Service (a StatefulSet's governing one) never gets the slice:
// its clients take pod addresses from DNS and dial the app's port on them,
// where an activator listens on nothing, and the webhook routes through a
// ClusterIP Service when there is one (SidecarReachable HeadlessService).
func (h *handoff) needsHandoff(ctx context.Context, r *routingv1alpha1.AppRoute, svc *corev1.Service) string {
	if svc.Spec.ClusterIP == corev1.ClusterIPNone {
		return ""
	}
	if mayGoToZero(r) {
		return "the app is idle: KEDA may take it to zero"
	}
	if n, ok := h.targetReplicas(ctx, r); ok && n == 0 {
		return "the " + cmp.Or(r.Spec.ScaleTargetRef.Kind, "Deployment") + " is scaled to 0"
	}
	for _, sl := range h.src.slicesOf(ctx, svc.Namespace, svc.Name) {
		if isHandoff(&sl) {
			continue
		}
		for _, e := range sl.Endpoints {
			if ptr.Deref(e.Conditions.Ready, true) && !ptr.Deref(e.Conditions.Terminating, false) {
				return ""
			}
		}
	}
	return "no ready endpoint"
}

// targetReplicas is spec.replicas of r's workload in the cache: a
// Deployment's or a StatefulSet's, or an object's of a --scale-targets
// kind; ok is false when it is unknown (not in the cache, unset, or of a
// kind not listed, whose objects the activator does not read).
func (h *handoff) targetReplicas(ctx context.Context, r *routingv1alpha1.AppRoute) (int32, bool) {
	ref := r.Spec.ScaleTargetRef
	key := types.NamespacedName{Namespace: r.Namespace, Name: ref.Name}
	gk := workload.GroupKindOf(ref.APIVersion, ref.Kind)
	var replicas *int32
	switch gk {
	case workload.Deployment.GroupKind():
		var d appsv1.Deployment
		if err := h.src.cache.Get(ctx, key, &d); err != nil {
			return 0, false
		}
		replicas = d.Spec.Replicas
	case workload.StatefulSet.GroupKind():
		var s appsv1.StatefulSet
		if err := h.src.cache.Get(ctx, key, &s); err != nil {
			return 0, false
		}
		replicas = s.Spec.Replicas
	default:
		if !listedKind(h.mapper, h.cfg.ScaleTargets, gk) {
			return 0, false
		}
		u := &unstructured.Unstructured{}
		u.SetAPIVersion(ref.APIVersion)
		u.SetKind(ref.Kind)
		if err := h.src.cache.Get(ctx, key, u); err != nil {
			return 0, false
		}
		n, set, err := workload.Replicas(u)
		if err != nil || !set {
			return 0, false
		}
		return n, true
	}
	if replicas == nil {
		return 0, false
	}
	return *replicas, true
}

// listedKind reports whether gk is a kind listed in --scale-targets
// (targets): one of its group whose resource m maps to kind gk.Kind, as
// the webhook resolves them. Another kind of a listed group is not listed
// (the activator may not read it); m is asked only about listed resources.
func listedKind(m meta.RESTMapper, targets []schema.GroupResource, gk schema.GroupKind) bool {
	for _, gr := range targets {
		if gr.Group != gk.Group {
			continue
		}
		if gvk, err := m.KindFor(gr.WithVersion("")); err == nil && gvk.Kind == gk.Kind {
			return true
		}
	}
	return false
}

func (h *handoff) current(ctx context.Context, ns, name string) (*discoveryv1.EndpointSlice, bool) {
	var sl discoveryv1.EndpointSlice
	if err := h.src.cache.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &sl); err != nil {
		return nil, false
	}
	return &sl, true
}

func (h *handoff) desired(ctx context.Context, r *routingv1alpha1.AppRoute, svc *corev1.Service, ports []corev1.ServicePort, name string) (*discoveryv1.EndpointSlice, error) {
	sl := &discoveryv1.EndpointSlice{
		TypeMeta: metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"},
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: r.Namespace,
			Labels: map[string]string{
				discoveryv1.LabelServiceName: svc.Name,
				discoveryv1.LabelManagedBy:   h.names.EndpointSliceManagedBy(),
				h.names.Key(RouteLabel):      r.Name,
				h.names.Key(PoolLabel):       h.cfg.Pool,
			},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: routingv1alpha1.GroupVersion(h.names.Group()).String(), Kind: routingv1alpha1.Kind,
				Name: r.Name, UID: r.UID,
			}},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{},
	}
	for _, p := range ports {
		sl.Ports = append(sl.Ports, discoveryv1.EndpointPort{Name: &p.Name, Port: ptr.To(int32(h.cfg.HandoffPort)), Protocol: ptr.To(corev1.ProtocolTCP), AppProtocol: p.AppProtocol})
	}
	pods, err := h.src.activatorPods(ctx)
	if err != nil {
		return nil, err
	}
	listed := decide(view{self: h.cfg.PodName, pods: pods}).listed
	for i := range pods {
		p := &pods[i]
		if _, ok := slices.BinarySearch(listed, p.Name); !ok {
			continue
		}
		ep := discoveryv1.Endpoint{
			Addresses:  []string{p.Status.PodIP},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: p.UID},
		}
		if p.Spec.NodeName != "" {
			ep.NodeName = ptr.To(p.Spec.NodeName)
		}
		sl.Endpoints = append(sl.Endpoints, ep)
	}
	slices.SortFunc(sl.Endpoints, func(a, b discoveryv1.Endpoint) int { return strings.Compare(a.Addresses[0], b.Addresses[0]) })
	return sl, nil
}

// sameSlice compares what the hand-off controller sets.
func sameSlice(cur, want *discoveryv1.EndpointSlice) bool {
	if len(cur.Endpoints) != len(want.Endpoints) || len(cur.Ports) != len(want.Ports) {
		return false
	}
	for k, v := range want.Labels {
		if cur.Labels[k] != v {
			return false
		}
	}
	for i := range want.Endpoints {
		c, w := cur.Endpoints[i], want.Endpoints[i]
		if !slices.Equal(c.Addresses, w.Addresses) || !ptr.Deref(c.Conditions.Ready, true) {
			return false
		}
	}
	for i := range want.Ports {
		c, w := cur.Ports[i], want.Ports[i]
		if ptr.Deref(c.Name, "") != ptr.Deref(w.Name, "") || ptr.Deref(c.Port, 0) != ptr.Deref(w.Port, 0) {
			return false
		}
	}
	return len(cur.OwnerReferences) == 1 && cur.OwnerReferences[0].UID == want.OwnerReferences[0].UID
}

func (h *handoff) delete(ctx context.Context, sl *discoveryv1.EndpointSlice, why string) error {
	uid := sl.UID
	err := h.kube.DiscoveryV1().EndpointSlices(sl.Namespace).Delete(ctx, sl.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete hand-off slice %s/%s: %w", sl.Namespace, sl.Name, err)
	}
	h.log.Info("hand-off slice removed", "namespace", sl.Namespace, "service", sl.Labels[discoveryv1.LabelServiceName], "slice", sl.Name, "why", why)
	return nil
}

// mayGoToZero reports whether KEDA may take r's app to zero: its Idle
// condition, written by the scaler KEDA asks, is True (the scaler tells
// KEDA the app is inactive; KEDA waits the ScaledObject's cooldownPeriod,
// then sets replicas to 0). While the slice is up and the app still warm,
// the activators forward what reaches them to the ready pods, whose
// sidecars count it: the app turns active, Idle False, and the slice goes.
// A route that no ScaledObject scales (ScaledByKEDA False) has nothing
// that takes it to zero, and no scaler keeps its Idle true to the figures
// any more: its Idle counts for nothing. A route without Idle (no scaler
// has written it yet) is not idle.
func mayGoToZero(r *routingv1alpha1.AppRoute) bool {
	return meta.IsStatusConditionTrue(r.Status.Conditions, routingv1alpha1.ConditionIdle) &&
		!meta.IsStatusConditionFalse(r.Status.Conditions, routingv1alpha1.ConditionScaledByKEDA)
}
