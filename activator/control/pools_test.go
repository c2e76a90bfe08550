package control

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/groupsuffix"
)

// TestPoolsAdmit: the first pool whose selectors both match admits a
// route; the default pool (last, no selector) takes the rest; with a
// selector on the default pool, a route nobody selects is admitted by
// none, and why names every pool tried.
func TestPoolsAdmit(t *testing.T) {
	ps, err := parsePools(`[
		{"name": "a", "routeSelector": {"matchLabels": {"tier": "gold"}}},
		{"name": "b", "routeSelector": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["gold", "silver"]}]},
		              "namespaceSelector": {"matchLabels": {"team": "pay"}}},
		{"name": "default"}
	]`)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		route, ns labels.Set
		want      string
	}{
		{labels.Set{"tier": "gold"}, labels.Set{"team": "pay"}, "a"}, // a and b match: a is listed first
		{labels.Set{"tier": "silver"}, labels.Set{"team": "pay"}, "b"},
		{labels.Set{"tier": "silver"}, labels.Set{"team": "ops"}, "default"},
		{nil, nil, "default"},
	} {
		if got, why := ps.admit(tc.route, tc.ns); got != tc.want || !strings.Contains(why, "activator pool "+tc.want+" admits") {
			t.Errorf("route %v in namespace %v: pool %q (%s), want %q", tc.route, tc.ns, got, why, tc.want)
		}
	}

	strict, err := parsePools(`[{"name": "a", "routeSelector": {"matchLabels": {"tier": "gold"}}}, {"name": "default", "namespaceSelector": {"matchLabels": {"shared": "true"}}}]`)
	if err != nil {
		t.Fatal(err)
	}
	got, why := strict.admit(labels.Set{"tier": "bronze"}, labels.Set{"team": "ops"})
	if want := `no activator pool selects the route (labels "tier=bronze"; namespace labels "team=ops"); pools, in order: a (routeSelector tier=gold), default (namespaceSelector shared=true)`; got != "" || why != want {
		t.Errorf("unselected route: pool %q, why %q\nwant none, why %q", got, why, want)
	}
}

func TestParsePoolsRefuses(t *testing.T) {
	for data, want := range map[string]string{
		`[{"name": "A"}]`:                `pool name "A"`,
		`[{"name": "a"}, {"name": "a"}]`: `pool "a" listed twice`,
		`[{"name": "a", "routeSelector": {"matchExpressions": [{"key": "x", "operator": "Bogus"}]}}]`: `pool "a" routeSelector`,
		`{"name": "a"}`: `pools.json`,
	} {
		if _, err := parsePools(data); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parsePools(%s) = %v, want an error with %q", data, err, want)
		}
	}
}

// TestPoolNames: the default pool's Lease and hand-off slice names are the
// plain ones; other pools' names differ from them, from each other, and
// from another instance's.
func TestPoolNames(t *testing.T) {
	ebb, team1 := groupsuffix.MustNew("ebb.dev"), groupsuffix.MustNew("team1.example.com")
	if got := poolLeaseName(ebb, DefaultPool); got != "activator.ebb.dev" {
		t.Errorf("default pool's Lease %q", got)
	}
	if got := poolLeaseName(ebb, "a"); got != "activator-a.ebb.dev" {
		t.Errorf("pool a's Lease %q", got)
	}
	if got := poolSliceName("hello", ebb, DefaultPool); got != "hello-activator-ee974f74" {
		t.Errorf("default pool's slice %q, want hello-activator-ee974f74", got)
	}
	seen := map[string]bool{}
	for _, n := range []groupsuffix.Names{ebb, team1} {
		for _, p := range []string{DefaultPool, "a", "b"} {
			name := poolSliceName(strings.Repeat("s", 70), n, p)
			if seen[name] || len(name) > 63 {
				t.Errorf("slice name %q (%d bytes) of %s pool %s: taken or too long", name, len(name), n.Suffix(), p)
			}
			seen[name] = true
		}
	}
}

// TestBinderKeepsTheLastGoodPools: without the pools ConfigMap no pool is
// known (the controllers then leave slices and status alone); a broken
// edit keeps the pools read before, with the error; without
// --pools-configmap the replica's own pool admits every route.
func TestBinderKeepsTheLastGoodPools(t *testing.T) {
	ctx := t.Context()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ebb-system", Name: "pools", ResourceVersion: "1"},
		Data: map[string]string{PoolsKey: `[{"name": "a", "routeSelector": {"matchLabels": {"tier": "a"}}}, {"name": "default"}]`}}
	route := &routingv1alpha1.AppRoute{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "hello", Labels: map[string]string{"tier": "a"}}}

	b := &binder{cfg: Config{PodNamespace: "ebb-system", PoolsConfigMap: "pools", Pool: DefaultPool}, cache: fake.NewClientBuilder().Build()}
	if ps, err := b.current(ctx); len(ps) != 0 || err == nil {
		t.Errorf("no ConfigMap: pools %v, error %v; want none and an error", ps, err)
	}
	if pool, why := b.admit(ctx, route); pool != "" || !strings.Contains(why, "no activator pools known") {
		t.Errorf("no ConfigMap: admitted by %q (%s)", pool, why)
	}

	b.cache = fake.NewClientBuilder().WithObjects(cm).Build()
	if pool, _ := b.admit(ctx, route); pool != "a" {
		t.Errorf("admitted by %q, want a", pool)
	}
	broken := cm.DeepCopy()
	broken.ResourceVersion, broken.Data[PoolsKey] = "2", `[{"name": "A"}]`
	b.cache = fake.NewClientBuilder().WithObjects(broken).Build()
	ps, err := b.current(ctx)
	if len(ps) != 2 || err == nil || !strings.Contains(err.Error(), `pool name "A"`) {
		t.Errorf("a broken edit: pools %v, error %v; want the 2 read before and the error", ps, err)
	}

	alone := &binder{cfg: Config{Pool: "gold"}}
	if pool, _ := alone.admit(ctx, route); pool != "gold" {
		t.Errorf("without --pools-configmap: admitted by %q, want the replica's own pool", pool)
	}
}
