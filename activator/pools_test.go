package activator

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/labels"

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

// TestPoolNames: the default pool keeps the Lease and hand-off slice names
// of an activator before pools (an upgrade finds its own slices); other
// pools' names differ from it, from each other, and from another
// instance's.
func TestPoolNames(t *testing.T) {
	ebb, team1 := groupsuffix.MustNew("ebb.dev"), groupsuffix.MustNew("team1.example.com")
	if got := poolLeaseName(ebb, DefaultPool); got != "activator.ebb.dev" {
		t.Errorf("default pool's Lease %q", got)
	}
	if got := poolLeaseName(ebb, "a"); got != "activator-a.ebb.dev" {
		t.Errorf("pool a's Lease %q", got)
	}
	if got := poolSliceName("hello", ebb, DefaultPool); got != "hello-activator-ee974f74" {
		t.Errorf("default pool's slice %q: the name before pools was hello-activator-ee974f74", got)
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
