package control

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/groupsuffix"
)

// DefaultPool is the name of the pool every route falls to when no other
// pool selects it (the chart's main activator Deployment).
const DefaultPool = "default"

// PoolsKey is the key of the pools ConfigMap (--pools-configmap) that
// lists every pool of the instance, as JSON, in the order they are tried.
const PoolsKey = "pools.json"

// PoolMetricLabel is the label every metric of an activator carries with
// its pool's name.
const PoolMetricLabel = "pool"

// PoolLabel on a hand-off slice names the pool whose activators it lists.
const PoolLabel = "activator-pool"

// Pool is one activator pool's selection of routes. A route is admitted by
// the first pool of the list whose selectors both match it (an unset
// selector matches everything): exactly one pool, or none.
type Pool struct {
	Name string `json:"name"`
	// RouteSelector selects AppRoutes by their labels (the pod template's
	// <suffix>/route-labels).
	RouteSelector *metav1.LabelSelector `json:"routeSelector,omitempty"`
	// NamespaceSelector selects AppRoutes by their namespace's labels.
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
}

// pools is the compiled list of pools, in the order they are tried.
type pools []compiledPool

type compiledPool struct {
	name      string
	route, ns labels.Selector // nil: everything
}

// parsePools reads the pools ConfigMap's JSON: valid, unique DNS-label
// names and valid selectors.
func parsePools(data string) (pools, error) {
	var list []Pool
	if err := json.Unmarshal([]byte(data), &list); err != nil {
		return nil, fmt.Errorf("%s: %w", PoolsKey, err)
	}
	out := make(pools, 0, len(list))
	seen := map[string]bool{}
	for _, p := range list {
		if errs := validation.IsDNS1123Label(p.Name); len(errs) > 0 {
			return nil, fmt.Errorf("%s: pool name %q: %s", PoolsKey, p.Name, strings.Join(errs, ", "))
		}
		if seen[p.Name] {
			return nil, fmt.Errorf("%s: pool %q listed twice", PoolsKey, p.Name)
		}
		seen[p.Name] = true
		c := compiledPool{name: p.Name}
		for _, s := range []struct {
			sel  *metav1.LabelSelector
			into *labels.Selector
			what string
		}{{p.RouteSelector, &c.route, "routeSelector"}, {p.NamespaceSelector, &c.ns, "namespaceSelector"}} {
			if s.sel == nil {
				continue
			}
			sel, err := metav1.LabelSelectorAsSelector(s.sel)
			if err != nil {
				return nil, fmt.Errorf("%s: pool %q %s: %w", PoolsKey, p.Name, s.what, err)
			}
			if !sel.Empty() {
				*s.into = sel
			}
		}
		out = append(out, c)
	}
	return out, nil
}

// admit returns the pool that admits a route labelled routeLabels in a
// namespace labelled nsLabels, and why in words; "" when none does.
func (ps pools) admit(routeLabels, nsLabels labels.Set) (string, string) {
	for _, p := range ps {
		if (p.route == nil || p.route.Matches(routeLabels)) && (p.ns == nil || p.ns.Matches(nsLabels)) {
			return p.name, "activator pool " + p.name + " admits the route: " + p.describe()
		}
	}
	tried := make([]string, len(ps))
	for i, p := range ps {
		tried[i] = p.name + " (" + p.describe() + ")"
	}
	return "", fmt.Sprintf("no activator pool selects the route (labels %q; namespace labels %q); pools, in order: %s",
		routeLabels.String(), nsLabels.String(), strings.Join(tried, ", "))
}

func (p compiledPool) describe() string {
	var parts []string
	if p.route != nil {
		parts = append(parts, "routeSelector "+p.route.String())
	}
	if p.ns != nil {
		parts = append(parts, "namespaceSelector "+p.ns.String())
	}
	if len(parts) == 0 {
		return "selects every route"
	}
	return strings.Join(parts, ", ")
}

// binder tells which pool admits a route, from the pools ConfigMap and the
// namespaces in the cache; without a ConfigMap this replica's pool admits
// every route (one pool).
type binder struct {
	cfg   Config
	cache client.Reader // the manager's cache: the ConfigMap, Namespaces

	mu      sync.Mutex
	version string // ResourceVersion of the ConfigMap compiled
	pools   pools
	err     error
}

// current returns the pools in force: those of the ConfigMap, the last good
// ones while it is broken (with its error), or this pool alone without one.
func (b *binder) current(ctx context.Context) (pools, error) {
	if b.cfg.PoolsConfigMap == "" {
		return pools{{name: b.cfg.Pool}}, nil
	}
	var cm corev1.ConfigMap
	// Read only, on every route's binding: no deep copy.
	if err := b.cache.Get(ctx, types.NamespacedName{Namespace: b.cfg.PodNamespace, Name: b.cfg.PoolsConfigMap}, &cm, client.UnsafeDisableDeepCopy); err != nil {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.pools, fmt.Errorf("pools ConfigMap %s/%s: %w", b.cfg.PodNamespace, b.cfg.PoolsConfigMap, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if cm.ResourceVersion != b.version || b.version == "" {
		ps, err := parsePools(cm.Data[PoolsKey])
		b.version, b.err = cm.ResourceVersion, err
		if err == nil {
			b.pools = ps
		}
	}
	return b.pools, b.err
}

// admit returns the pool that admits r and why ("" when none does, or
// when no pools are known yet).
func (b *binder) admit(ctx context.Context, r *routingv1alpha1.AppRoute) (string, string) {
	ps, err := b.current(ctx)
	if len(ps) == 0 {
		return "", fmt.Sprintf("no activator pools known: %v", err)
	}
	var ns corev1.Namespace
	if ps.needNamespaces() {
		if err := b.cache.Get(ctx, types.NamespacedName{Name: r.Namespace}, &ns, client.UnsafeDisableDeepCopy); err != nil {
			return "", fmt.Sprintf("namespace %s not known yet: %v", r.Namespace, err)
		}
	}
	return ps.admit(labels.Set(r.Labels), labels.Set(ns.Labels))
}

// needNamespaces reports whether a pool selects by namespace labels.
func (ps pools) needNamespaces() bool {
	for _, p := range ps {
		if p.ns != nil {
			return true
		}
	}
	return false
}

// poolLeaseName is the pool's Lease: activator.<suffix> for the default
// pool, activator-<pool>.<suffix> for the others.
func poolLeaseName(names groupsuffix.Names, pool string) string {
	if pool == DefaultPool {
		return names.ClusterScopedName("activator")
	}
	return names.ClusterScopedName("activator-" + pool)
}

// poolSliceName is the hand-off slice of a Service for one instance's
// pool: the Service's name and a hash of the instance's managed-by value
// (and the pool's name, but for the default pool, the one most
// installations have alone).
func poolSliceName(service string, names groupsuffix.Names, pool string) string {
	id := names.EndpointSliceManagedBy()
	if pool != DefaultPool {
		id += "/" + pool
	}
	sum := sha256.Sum256([]byte(id))
	suffix := "-activator-" + hex.EncodeToString(sum[:4])
	if len(service) > 63-len(suffix) {
		service = service[:63-len(suffix)]
	}
	return service + suffix
}
