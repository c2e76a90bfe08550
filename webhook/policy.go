package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/internal/staticanswer"
)

// Indexes of the cached RoutePolicies: by spec.app, and by the ConfigMap
// their placeholder reads.
const (
	policyAppIndex       = "ebb.spec.app"
	policyConfigMapIndex = "ebb.spec.placeholder.configMapKeyRef.name"
)

// maxStaticJSON bounds a policy's static responses as the sidecar gets them
// (EBB_STATIC_RESPONSES, in every pod of the app): below Linux's bound on one
// environment string (128 KiB), which a policy the CRD takes
// (MaxStaticResponsesBytes of bodies and headers, at most 6 bytes of JSON
// each, and their names and paths) never reaches.
const maxStaticJSON = 120 << 10

// policies reads RoutePolicies and what they reference: the policy of an
// app (the oldest naming it), its static responses as the sidecar takes
// them, and its placeholder's page from the ConfigMap. RoutePolicies come
// from the manager's cache (stripped of managed fields), ConfigMaps' metadata
// from a metadata-only cache; a page is read from the API server (one GET of
// that ConfigMap) only when the ConfigMap's resourceVersion is not the one of
// the page already read.
type policies struct {
	names  groupsuffix.Names
	client client.Reader // the manager's cache
	api    client.Reader // the API server, for the one ConfigMap a page is in
	// pages are the placeholder pages read, by ConfigMap and key
	// (pageKey → page): one page (at most 64 KiB) per ConfigMap key a
	// policy's placeholder has named, until its ConfigMap is deleted.
	pages sync.Map
}

type pageKey struct{ namespace, name, key string }

// page is a placeholder page as read from its ConfigMap at resourceVersion
// rv, or the problem that kept it from being read.
type page struct {
	rv, body, problem string
}

// index registers the RoutePolicies' indexes with the manager's cache.
func (p *policies) index(ctx context.Context, mgr ctrl.Manager) error {
	idx := mgr.GetFieldIndexer()
	if err := idx.IndexField(ctx, &routingv1alpha1.RoutePolicy{}, policyAppIndex, func(o client.Object) []string {
		return []string{o.(*routingv1alpha1.RoutePolicy).Spec.App}
	}); err != nil {
		return fmt.Errorf("index RoutePolicies by spec.app: %w", err)
	}
	if err := idx.IndexField(ctx, &routingv1alpha1.RoutePolicy{}, policyConfigMapIndex, func(o client.Object) []string {
		if ph := o.(*routingv1alpha1.RoutePolicy).Spec.Placeholder; ph != nil {
			return []string{ph.ConfigMapKeyRef.Name}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("index RoutePolicies by ConfigMap: %w", err)
	}
	if err := idx.IndexField(ctx, &routingv1alpha1.RoutePolicy{}, policyWakesIndex, indexWakes); err != nil {
		return fmt.Errorf("index RoutePolicies by spec.wakes: %w", err)
	}
	return nil
}

// forApp returns the RoutePolicies of namespace naming app, oldest first
// (then by name): the first one is the app's, the others are superseded.
// With client.UnsafeDisableDeepCopy they are the cache's own objects, to
// read only.
func (p *policies) forApp(ctx context.Context, namespace, app string, opts ...client.ListOption) ([]routingv1alpha1.RoutePolicy, error) {
	var list routingv1alpha1.RoutePolicyList
	opts = append([]client.ListOption{client.InNamespace(namespace), client.MatchingFields{policyAppIndex: app}}, opts...)
	if err := p.client.List(ctx, &list, opts...); err != nil {
		return nil, fmt.Errorf("list RoutePolicies of app %s in %s: %w", app, namespace, err)
	}
	slices.SortFunc(list.Items, func(a, b routingv1alpha1.RoutePolicy) int {
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			if a.CreationTimestamp.Before(&b.CreationTimestamp) {
				return -1
			}
			return 1
		}
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return list.Items, nil
}

// StaticRules converts a policy's static responses into the rules the
// sidecar and the activator compile (package staticanswer), and compiles
// them: what the CRD's schema let through but the data path would refuse is
// an error here, so no sidecar is started with rules it refuses.
func StaticRules(in []routingv1alpha1.StaticResponse) ([]staticanswer.Rule, error) {
	if len(in) == 0 {
		return nil, nil
	}
	out := make([]staticanswer.Rule, len(in))
	for i, sr := range in {
		r := staticanswer.Rule{Name: sr.Name, When: sr.When, Method: sr.Match.Method,
			Status: int(sr.Response.Status), Body: sr.Response.Body}
		if sr.Match.Path != nil {
			r.PathType, r.Path = sr.Match.Path.Type, sr.Match.Path.Value
		}
		for _, h := range sr.Match.Headers {
			r.Headers = append(r.Headers, staticanswer.Header{Name: h.Name, Value: h.Value})
		}
		for _, h := range sr.Response.Headers {
			r.ResponseHeaders = append(r.ResponseHeaders, staticanswer.Header{Name: h.Name, Value: h.Value})
		}
		out[i] = r
	}
	if _, err := staticanswer.Compile(out); err != nil {
		return nil, err
	}
	return out, nil
}

// staticJSON is a policy's static responses as the sidecar's
// EBB_STATIC_RESPONSES: "" for none, or an error saying why the sidecar
// cannot be given them.
func staticJSON(pol *routingv1alpha1.RoutePolicy) (string, error) {
	rules, err := StaticRules(pol.Spec.StaticResponses)
	if err != nil || len(rules) == 0 {
		return "", err
	}
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // a body's < and > as they are, not 6 bytes each
	if err := enc.Encode(rules); err != nil {
		return "", fmt.Errorf("encode static responses: %w", err)
	}
	if b.Len() > maxStaticJSON {
		return "", fmt.Errorf("the static responses take %d bytes as the sidecar gets them, more than %d; shorten their bodies and headers", b.Len(), maxStaticJSON)
	}
	return strings.TrimSuffix(b.String(), "\n"), nil
}

// placeholder resolves pol's placeholder: the page with its body from the
// ConfigMap, or nil and the problem (ConfigMap or key missing, page too
// large) as a message naming it and the fix. It is nil, "" without one.
func (p *policies) placeholder(ctx context.Context, pol *routingv1alpha1.RoutePolicy) (*routingv1alpha1.Placeholder, string, error) {
	src := pol.Spec.Placeholder
	if src == nil {
		return nil, "", nil
	}
	ref := src.ConfigMapKeyRef
	key := pageKey{pol.Namespace, ref.Name, ref.Key}
	missing := fmt.Sprintf("ConfigMap %s not found in namespace %s; create it with the page under key %q (kubectl create configmap %s --from-file=%s=page.html)",
		ref.Name, pol.Namespace, ref.Key, ref.Name, ref.Key)
	cm := &metav1.PartialObjectMetadata{}
	cm.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	err := p.client.Get(ctx, types.NamespacedName{Namespace: pol.Namespace, Name: ref.Name}, cm)
	switch {
	case apierrors.IsNotFound(err):
		p.pages.Delete(key)
		return nil, missing, nil
	case err != nil:
		return nil, "", fmt.Errorf("get ConfigMap %s/%s metadata: %w", pol.Namespace, ref.Name, err)
	}
	pg, ok := p.pages.Load(key)
	if !ok || pg.(page).rv != cm.ResourceVersion {
		read, err := p.read(ctx, key, missing)
		if err != nil {
			return nil, "", err
		}
		p.pages.Store(key, read)
		pg = read
	}
	if pg.(page).problem != "" {
		return nil, pg.(page).problem, nil
	}
	out := &routingv1alpha1.Placeholder{Status: src.Status, Headers: src.Headers, Body: pg.(page).body}
	if out.Status == 0 {
		out.Status = 503
	}
	return out, "", nil
}

// read GETs the ConfigMap of key from the API server and keeps its page.
func (p *policies) read(ctx context.Context, key pageKey, missing string) (page, error) {
	var cm corev1.ConfigMap
	err := p.api.Get(ctx, types.NamespacedName{Namespace: key.namespace, Name: key.name}, &cm)
	switch {
	case apierrors.IsNotFound(err):
		return page{problem: missing}, nil
	case err != nil:
		return page{}, fmt.Errorf("get ConfigMap %s/%s: %w", key.namespace, key.name, err)
	}
	body, ok := cm.Data[key.key]
	switch {
	case !ok:
		return page{rv: cm.ResourceVersion, problem: fmt.Sprintf("ConfigMap %s has no key %q in its data; add the page under that key, or set placeholder.configMapKeyRef.key to the key that holds it", key.name, key.key)}, nil
	case len(body) > routingv1alpha1.MaxPlaceholderBodySize:
		return page{rv: cm.ResourceVersion, problem: fmt.Sprintf("key %q of ConfigMap %s holds %d bytes, more than %d; make the page smaller (link its images and styles rather than inlining them)",
			key.key, key.name, len(body), routingv1alpha1.MaxPlaceholderBodySize)}, nil
	}
	return page{rv: cm.ResourceVersion, body: body}, nil
}

// policyReconciler writes each RoutePolicy's Accepted condition: True once
// it is its app's policy and all of it can be copied into the app's
// AppRoute, False with the reason it is not (Superseded by an older policy
// of the app, NoSuchApp, InvalidStaticResponses, PlaceholderUnavailable,
// DependencyCycle).
// The route controller copies the policy into the route from the same
// reads. Its status is written only when it changes.
type policyReconciler struct {
	policies *policies
	client   client.Client
	log      logr.Logger
}

func (r *policyReconciler) setup(mgr ctrl.Manager) error {
	// The policies of the app an object is about: one policy's change may
	// make another its app's.
	ofApp := func(ctx context.Context, namespace, app string) []reconcile.Request {
		list, err := r.policies.forApp(ctx, namespace, app)
		if err != nil {
			r.log.Error(err, "list RoutePolicies", "namespace", namespace, "app", app)
			return nil
		}
		reqs := make([]reconcile.Request, len(list))
		for i := range list {
			reqs[i] = reconcile.Request{NamespacedName: types.NamespacedName{Namespace: namespace, Name: list[i].Name}}
		}
		return reqs
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("routepolicy_"+strings.NewReplacer(".", "_", "-", "_").Replace(r.policies.names.Suffix())).
		Watches(&routingv1alpha1.RoutePolicy{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return ofApp(ctx, o.GetNamespace(), o.(*routingv1alpha1.RoutePolicy).Spec.App)
		}), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// The policies of the apps that need its app: their wakes may now
		// close a cycle through it, or no longer.
		Watches(&routingv1alpha1.RoutePolicy{}, handler.EnqueueRequestsFromMapFunc(r.policiesNeeding),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// An app's route created or deleted.
		Watches(&routingv1alpha1.AppRoute{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return ofApp(ctx, o.GetNamespace(), o.GetName())
		}), builder.WithPredicates(createdOrDeleted)).
		WatchesMetadata(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			r.policies.forget(ctx, o)
			return r.policies.naming(ctx, o, func(pol *routingv1alpha1.RoutePolicy) types.NamespacedName {
				return types.NamespacedName{Namespace: pol.Namespace, Name: pol.Name}
			})
		})).
		Complete(r)
}

// createdOrDeleted lets through an object's creation and deletion only.
var createdOrDeleted = predicate.Funcs{UpdateFunc: func(event.UpdateEvent) bool { return false }}

// forget drops the pages read from ConfigMap cm once it is deleted (gone
// from the cache, which is updated before its watch's handlers run).
func (p *policies) forget(ctx context.Context, cm client.Object) {
	meta := &metav1.PartialObjectMetadata{}
	meta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	if err := p.client.Get(ctx, client.ObjectKeyFromObject(cm), meta); !apierrors.IsNotFound(err) {
		return
	}
	p.pages.Range(func(k, _ any) bool {
		if pk := k.(pageKey); pk.namespace == cm.GetNamespace() && pk.name == cm.GetName() {
			p.pages.Delete(k)
		}
		return true
	})
}

// naming maps a ConfigMap to what key says of each RoutePolicy of its
// namespace whose placeholder reads it.
func (p *policies) naming(ctx context.Context, cm client.Object, key func(*routingv1alpha1.RoutePolicy) types.NamespacedName) []reconcile.Request {
	var list routingv1alpha1.RoutePolicyList
	if err := p.client.List(ctx, &list, client.InNamespace(cm.GetNamespace()), client.MatchingFields{policyConfigMapIndex: cm.GetName()}); err != nil {
		return nil // the cache's List fails only on a missing index
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		if k := key(&list.Items[i]); k.Name != "" && !slices.ContainsFunc(reqs, func(r reconcile.Request) bool { return r.NamespacedName == k }) {
			reqs = append(reqs, reconcile.Request{NamespacedName: k})
		}
	}
	return reqs
}

// Reconcile computes one RoutePolicy's Accepted condition.
func (r *policyReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var pol routingv1alpha1.RoutePolicy
	if err := r.client.Get(ctx, req.NamespacedName, &pol); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	cond, err := r.accepted(ctx, &pol)
	if err != nil {
		return reconcile.Result{}, err
	}
	st := pol.Status.DeepCopy()
	st.ObservedGeneration = pol.Generation
	meta.SetStatusCondition(&st.Conditions, cond)
	if equality.Semantic.DeepEqual(&pol.Status, st) {
		return reconcile.Result{}, nil
	}
	body, err := json.Marshal(map[string]any{
		"apiVersion": routingv1alpha1.GroupVersion(r.policies.names.Group()).String(),
		"kind":       routingv1alpha1.RoutePolicyKind,
		"metadata":   map[string]any{"name": pol.Name, "namespace": pol.Namespace},
		"status":     st,
	})
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("encode RoutePolicy %s/%s status: %w", pol.Namespace, pol.Name, err)
	}
	out := &routingv1alpha1.RoutePolicy{ObjectMeta: metav1.ObjectMeta{Name: pol.Name, Namespace: pol.Namespace}}
	err = r.client.Status().Patch(ctx, out, client.RawPatch(types.ApplyPatchType, body), client.FieldOwner(FieldManager), client.ForceOwnership)
	if err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, fmt.Errorf("apply RoutePolicy %s/%s status: %w", pol.Namespace, pol.Name, err)
	}
	return reconcile.Result{}, nil
}

// accepted is pol's Accepted condition.
func (r *policyReconciler) accepted(ctx context.Context, pol *routingv1alpha1.RoutePolicy) (metav1.Condition, error) {
	cond := metav1.Condition{Type: routingv1alpha1.ConditionAccepted, ObservedGeneration: pol.Generation, Status: metav1.ConditionFalse}
	all, err := r.policies.forApp(ctx, pol.Namespace, pol.Spec.App)
	if err != nil {
		return cond, err
	}
	if len(all) > 0 && all[0].Name != pol.Name {
		cond.Reason = "Superseded"
		cond.Message = fmt.Sprintf("RoutePolicy %s names app %s too and is older: an app has one policy; move this policy's settings into %s and delete this one",
			all[0].Name, pol.Spec.App, all[0].Name)
		return cond, nil
	}
	var route routingv1alpha1.AppRoute
	err = r.client.Get(ctx, types.NamespacedName{Namespace: pol.Namespace, Name: pol.Spec.App}, &route)
	switch {
	case apierrors.IsNotFound(err):
		cond.Reason = "NoSuchApp"
		cond.Message = fmt.Sprintf("no app %s in namespace %s (no AppRoute %s): set spec.app to the %s label of the app's pod template",
			pol.Spec.App, pol.Namespace, pol.Spec.App, r.policies.names.AppLabel())
		return cond, nil
	case err != nil:
		return cond, fmt.Errorf("get AppRoute %s/%s: %w", pol.Namespace, pol.Spec.App, err)
	}
	if _, err := staticJSON(pol); err != nil {
		cond.Reason = "InvalidStaticResponses"
		cond.Message = "spec.staticResponses: " + err.Error() + "; neither the activators nor the sidecars answer them"
		return cond, nil
	}
	_, problem, err := r.policies.placeholder(ctx, pol)
	if err != nil {
		return cond, err
	}
	if problem != "" {
		cond.Reason = "PlaceholderUnavailable"
		cond.Message = "spec.placeholder: " + problem + "; until then the app has no placeholder page"
		return cond, nil
	}
	cycle, err := r.policies.policyCycle(ctx, pol)
	if err != nil {
		return cond, err
	}
	if cycle != nil {
		cond.Reason = "DependencyCycle"
		cond.Message = cycleMessage(cycle) + "; until then none of this policy's wakes is copied into AppRoute " + pol.Spec.App
		return cond, nil
	}
	cond.Status, cond.Reason = metav1.ConditionTrue, "Accepted"
	cond.Message = fmt.Sprintf("copied into AppRoute %s; pods started from now on answer its static responses (a running pod keeps the rules it started with)", pol.Spec.App)
	return cond, nil
}
