package routing

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestLookupPrecedence(t *testing.T) {
	t0 := time.Unix(1000, 0)
	routes := []Route[string]{
		{Key: Key{"shop", "exact"}, Hosts: []string{"Hello.Example.com"}, Value: "exact", Created: t0},
		{Key: Key{"shop", "api"}, Hosts: []string{"hello.example.com"}, PathPrefixes: []string{"/api", "/api/v2"}, Value: "api", Created: t0},
		{Key: Key{"shop", "v2"}, Hosts: []string{"hello.example.com"}, PathPrefixes: []string{"/api/v2/users"}, Value: "v2", Created: t0},
		{Key: Key{"shop", "wild"}, Hosts: []string{"*.example.com"}, Value: "wild", Created: t0},
		{Key: Key{"shop", "wild-deep"}, Hosts: []string{"*.eu.example.com"}, Value: "wild-deep", Created: t0},
		{Key: Key{"shop", "web"}, Service: "web", ClusterIPs: []string{"198.19.0.10"}, Value: "web", Created: t0},
		{Key: Key{"team", "web"}, Service: "web", Value: "team-web", Created: t0},
		{Key: Key{"team", "only"}, Service: "only", Value: "only", Created: t0},
		// Younger claim of the same host and prefix loses.
		{Key: Key{"other", "late"}, Hosts: []string{"hello.example.com"}, Value: "late", Created: t0.Add(time.Second)},
	}
	tab := Build(routes, nil)
	cases := []struct {
		host, path string
		want       string // "" = no route
	}{
		{"hello.example.com", "/", "exact"},
		{"HELLO.example.com:8080", "/x", "exact"},
		{"hello.example.com.", "/", "exact"},
		{"hello.example.com", "/api", "api"},
		{"hello.example.com", "/api/v2/x", "api"},
		{"hello.example.com", "/api/v2/users/1", "v2"},
		{"a.example.com", "/", "wild"},
		{"a.b.example.com", "/", "wild"},
		{"a.eu.example.com", "/", "wild-deep"},
		{"example.com", "/", ""},
		{"eu.example.com", "/", "wild"},
		{"web.shop", "/", "web"},
		{"web.shop:80", "/", "web"},
		{"web.shop.svc", "/", "web"},
		{"web.shop.svc.cluster.local", "/", "web"},
		{"web.team.svc.cluster.local:8080", "/", "team-web"},
		{"web", "/", ""}, // short name claimed by two namespaces
		{"only", "/", "only"},
		{"only:80", "/", "only"},
		{"198.19.0.10", "/", "web"},
		{"198.19.0.10:80", "/", "web"},
		{"unknown.test", "/", ""},
		{"", "/", ""},
		{":::", "/", ""},
		{"[::1]:80", "/", ""},
	}
	for _, c := range cases {
		r, ok := tab.Lookup(c.host, c.path)
		got := ""
		if ok {
			got = r.Value
		}
		if got != c.want {
			t.Errorf("Lookup(%q, %q) = %q, want %q", c.host, c.path, got, c.want)
		}
	}
	want := []Conflict{{Host: "hello.example.com", Prefix: "/", Winner: Key{"shop", "exact"}, Loser: Key{"other", "late"}, Reason: ReasonOlderRoute}}
	if d := cmp.Diff(want, tab.Conflicts); d != "" {
		t.Errorf("conflicts (-want +got):\n%s", d)
	}
}

func TestPrefixesOnlyRestrict(t *testing.T) {
	tab := Build([]Route[int]{{Key: Key{"a", "b"}, Hosts: []string{"x.test"}, PathPrefixes: []string{"/only"}, Value: 1}}, nil)
	if _, ok := tab.Lookup("x.test", "/other"); ok {
		t.Error("a path outside every prefix routed")
	}
	if _, ok := tab.Lookup("x.test", ""); ok {
		t.Error("an empty path routed to a prefixed route")
	}
	if r, ok := tab.Lookup("x.test", "/only/this"); !ok || r.Value != 1 {
		t.Error("a path inside the prefix did not route")
	}
}

func TestNilAndEmptyTables(t *testing.T) {
	var nilTab *Table[int]
	if _, ok := nilTab.Lookup("a", "/"); ok {
		t.Error("nil table routed")
	}
	if nilTab.Len() != 0 {
		t.Error("nil table has routes")
	}
	tab := Build[int](nil, nil)
	if _, ok := tab.Lookup("a.b", "/"); ok {
		t.Error("empty table routed")
	}
	// A duplicate key keeps the first.
	tab = Build([]Route[int]{{Key: Key{"a", "b"}, Hosts: []string{"x.test"}, Value: 1}, {Key: Key{"a", "b"}, Hosts: []string{"y.test"}, Value: 2}}, nil)
	if _, ok := tab.Lookup("y.test", "/"); ok || tab.Len() != 1 {
		t.Errorf("duplicate key: len %d, y.test routed %v", tab.Len(), ok)
	}
}

func BenchmarkLookup(b *testing.B) {
	var routes []Route[int]
	for i := range 1000 {
		routes = append(routes, Route[int]{Key: Key{"ns", string(rune('a'+i%26)) + string(rune('a'+i/26))}, Hosts: []string{string(rune('a'+i%26)) + string(rune('a'+i/26)) + ".example.com"}, Value: i})
	}
	routes = append(routes, Route[int]{Key: Key{"ns", "wild"}, Hosts: []string{"*.wild.test"}})
	tab := Build(routes, nil)
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := tab.Lookup("deep.x.wild.test:80", "/a/b"); !ok {
			b.Fatal("no route")
		}
	}
}

// A tenant's app created first in another namespace, listing every form of
// shop's Service address, gets none of shop's requests (issue 34).
func TestNamespaceOwnsItsServiceNames(t *testing.T) {
	t0 := time.Unix(1000, 0)
	squat := Key{"b", "squat"}
	routes := []Route[string]{
		{Key: squat, Created: t0, Value: "squat", Hosts: []string{
			"api.shop.svc.cluster.local", "API.shop.svc.cluster.local.", "api.shop.svc", "api.shop", "api", "198.19.0.20", "[fd00::20]",
			"*.shop.svc.cluster.local", "*.svc.cluster.local", "*.cluster.local", "*.shop", "x.pod.cluster.local", "squat.example.com"}},
		{Key: Key{"shop", "api"}, Created: t0.Add(3 * time.Second), Value: "shop", Service: "api", ClusterIPs: []string{"198.19.0.20", "fd00::20"}},
	}
	tab := Build(routes, nil)
	for _, host := range []string{
		"api.shop.svc.cluster.local", "API.SHOP.SVC.CLUSTER.LOCAL:80", "api.shop.svc.cluster.local.", "api.shop.svc.cluster.local.:80",
		"api.shop.svc", "api.shop", "api", "api:80", "198.19.0.20", "198.19.0.20:80", "[fd00::20]:80",
	} {
		if r, ok := tab.Lookup(host, "/"); !ok || r.Value != "shop" {
			t.Errorf("Lookup(%q) = %v, %v; want shop's app", host, r, ok)
		}
	}
	for _, host := range []string{"other.shop.svc.cluster.local", "x.svc.cluster.local", "x.pod.cluster.local"} {
		if r, ok := tab.Lookup(host, "/"); ok {
			t.Errorf("Lookup(%q) = %s; want no route", host, r.Value)
		}
	}
	if r, ok := tab.Lookup("squat.example.com", "/"); !ok || r.Value != "squat" {
		t.Errorf("the squatter's own host does not route to it")
	}
	reasons := map[string]string{}
	for _, c := range tab.Conflicts {
		if c.Loser != squat {
			t.Errorf("conflict lost by %s, want only the squatter's: %+v", c.Loser, c)
		}
		reasons[c.Host] = c.Reason
	}
	want := map[string]string{
		"api.shop.svc.cluster.local": ReasonClusterName,
		"api.shop.svc":               ReasonClusterName,
		"api.shop":                   ReasonServiceName,
		"api":                        ReasonNotAHostName,
		"198.19.0.20":                ReasonNotAHostName,
		"fd00::20":                   ReasonNotAHostName,
		"*.shop.svc.cluster.local":   ReasonClusterName,
		"*.svc.cluster.local":        ReasonClusterName,
		"*.cluster.local":            ReasonClusterName,
		"*.shop":                     ReasonNotAHostName,
		"x.pod.cluster.local":        ReasonClusterName,
	}
	if d := cmp.Diff(want, reasons); d != "" {
		t.Errorf("the squatter's refused hosts (-want +got):\n%s", d)
	}
}

// A namespace's own route may list its own cluster names.
func TestOwnClusterNamesAllowed(t *testing.T) {
	tab := Build([]Route[string]{{Key: Key{"shop", "web"}, Value: "web", Hosts: []string{"web-canary.shop.svc.cluster.local", "*.shop.svc"}}}, nil)
	for _, host := range []string{"web-canary.shop.svc.cluster.local", "x.shop.svc"} {
		if _, ok := tab.Lookup(host, "/"); !ok {
			t.Errorf("Lookup(%q): own cluster name not routed", host)
		}
	}
	if len(tab.Conflicts) != 0 {
		t.Errorf("conflicts: %+v", tab.Conflicts)
	}
}

// A domain bound to a namespace routes only to that namespace's apps, older
// claims of other namespaces or not; the most specific binding decides.
func TestDomainClaims(t *testing.T) {
	t0 := time.Unix(1000, 0)
	routes := []Route[string]{
		{Key: Key{"b", "squat"}, Created: t0, Value: "squat", Hosts: []string{"shop.example.com", "*.example.com", "free.test"}},
		{Key: Key{"shop", "web"}, Created: t0.Add(time.Second), Value: "shop", Hosts: []string{"shop.example.com", "*.team.example.com"}},
		{Key: Key{"team", "web"}, Created: t0.Add(time.Second), Value: "team", Hosts: []string{"web.team.example.com"}},
		{Key: Key{"c", "late"}, Created: t0.Add(time.Second), Value: "late", Hosts: []string{"free.test"}},
	}
	claims := Claims{"Example.com.": "shop", "team.example.com": "team", "svc.cluster.local": "b"}
	tab := Build(routes, claims)
	cases := map[string]string{
		"shop.example.com":     "shop",
		"other.example.com":    "", // b's wildcard is refused: example.com is shop's
		"web.team.example.com": "team",
		"x.team.example.com":   "", // shop's wildcard is refused: team holds the narrower claim
		"free.test":            "squat",
		"api.shop.svc":         "",
	}
	for host, want := range cases {
		got := ""
		if r, ok := tab.Lookup(host, "/"); ok {
			got = r.Value
		}
		if got != want {
			t.Errorf("Lookup(%q) = %q, want %q", host, got, want)
		}
	}
	var got []string
	for _, c := range tab.Conflicts {
		got = append(got, c.Loser.String()+" "+c.Host+" "+c.Reason)
	}
	want := []string{
		"b/squat shop.example.com " + ReasonDomainClaim,
		"b/squat *.example.com " + ReasonDomainClaim,
		"c/late free.test " + ReasonOlderRoute,
		"shop/web *.team.example.com " + ReasonDomainClaim,
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("conflicts (-want +got):\n%s", d)
	}
}

// A Service's names go to its own namespace on every path: a route of
// another namespace listing api.shop with a longer path prefix, or when
// shop's own route serves some paths only, serves none of them; a wildcard
// of IPv4 labels catches no ClusterIP (issue 34, review).
func TestServiceNamesOwnedOnEveryPath(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		name          string
		shopPaths     []string
		squatPaths    []string
		shopCreated   time.Time
		squatCreated  time.Time
		wantShopPaths []string // paths shop's route serves on its names
	}{
		{name: "squatter younger, longer prefix", squatPaths: []string{"/login"}, shopCreated: t0, squatCreated: t0.Add(time.Hour), wantShopPaths: []string{"/", "/login"}},
		{name: "squatter older, shop serves /api only", shopPaths: []string{"/api"}, shopCreated: t0.Add(time.Hour), squatCreated: t0, wantShopPaths: []string{"/api"}},
		{name: "both with prefixes", shopPaths: []string{"/api"}, squatPaths: []string{"/api/admin", "/other"}, shopCreated: t0.Add(time.Hour), squatCreated: t0, wantShopPaths: []string{"/api", "/api/admin"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tab := Build([]Route[string]{
				{Key: Key{"shop", "api"}, Created: tc.shopCreated, Value: "shop", Service: "api", ClusterIPs: []string{"10.96.0.5"}, PathPrefixes: tc.shopPaths},
				{Key: Key{"b", "squat"}, Created: tc.squatCreated, Value: "squat", PathPrefixes: tc.squatPaths,
					Hosts: []string{"api.shop", "*.96.0.5", "*.0.5", "*.api.shop", "squat.example.com"}},
			}, nil)
			for _, host := range []string{"api.shop", "api.shop.:80", "API.SHOP", "api.shop.svc.cluster.local", "10.96.0.5", "10.96.0.5:80", "api"} {
				for _, path := range []string{"/", "/login", "/api", "/api/admin", "/other"} {
					got := ""
					if r, ok := tab.Lookup(host, path); ok {
						got = r.Value
					}
					want := ""
					for _, p := range tc.wantShopPaths {
						if strings.HasPrefix(path, p) {
							want = "shop"
						}
					}
					if got != want {
						t.Errorf("Lookup(%q, %q) = %q, want %q", host, path, got, want)
					}
				}
			}
			reasons := map[string]string{}
			for _, c := range tab.Conflicts {
				if c.Loser != (Key{"b", "squat"}) {
					t.Errorf("conflict lost by %s: %+v", c.Loser, c)
				}
				reasons[c.Host] = c.Reason
			}
			want := map[string]string{"api.shop": ReasonServiceName, "*.96.0.5": ReasonNotAHostName, "*.0.5": ReasonNotAHostName}
			if d := cmp.Diff(want, reasons); d != "" {
				t.Errorf("the squatter's refused hosts (-want +got):\n%s", d)
			}
			if r, ok := tab.Lookup("x.api.shop", "/"); tc.squatPaths == nil && (!ok || r.Value != "squat") {
				t.Errorf("a name under api.shop that names no Service is the squatter's to route: %v %v", r, ok)
			}
		})
	}
}

// Under another cluster domain, a name with a svc or pod label belongs to
// the namespace before it.
func TestClusterDomainNamespace(t *testing.T) {
	for name, want := range map[string]string{
		"api.shop.svc.cluster.local": "shop", "api.shop.svc": "shop", "1-2-3-4.shop.pod.cluster.local": "shop",
		"api.shop.svc.corp.example": "shop", "cluster.local": "", "svc.cluster.local": "", "x.cluster.local": "",
	} {
		got, ok := ClusterDomainNamespace(name)
		if !ok || got != want {
			t.Errorf("ClusterDomainNamespace(%q) = %q, %v; want %q, true", name, got, ok, want)
		}
	}
	for _, name := range []string{"svc.example.com", "example.com", "pods.example.com", "shop.example"} {
		if ns, ok := ClusterDomainNamespace(name); ok {
			t.Errorf("ClusterDomainNamespace(%q) = %q, true; want outside the cluster domain", name, ns)
		}
	}
}

// HostPaths claim each host with its own prefixes, beside the route's
// Hosts × PathPrefixes: a host in both is claimed with both sets, and an
// empty set means every path.
func TestHostPathsPerHost(t *testing.T) {
	t0 := time.Unix(1000, 0)
	routes := []Route[string]{
		{Key: Key{"shop", "web"}, Created: t0, Value: "web",
			Hosts: []string{"shop.example.com"}, PathPrefixes: []string{"/shop"},
			HostPaths: []HostPaths{
				{Host: "shop.example.com", PathPrefixes: []string{"/api"}},
				{Host: "Www.Example.com"},
				{Host: "*.apps.example.com", PathPrefixes: []string{"/v1", "/v2"}},
			}},
		{Key: Key{"shop", "admin"}, Created: t0, Value: "admin",
			HostPaths: []HostPaths{{Host: "shop.example.com", PathPrefixes: []string{"/admin"}}}},
	}
	tab := Build(routes, nil)
	cases := []struct{ host, path, want string }{
		{"shop.example.com", "/shop/cart", "web"},
		{"shop.example.com", "/api/x", "web"},
		{"shop.example.com", "/admin", "admin"},
		{"shop.example.com", "/", ""}, // neither claim covers it
		{"www.example.com", "/anything", "web"},
		{"a.apps.example.com", "/v2/x", "web"},
		{"a.apps.example.com", "/v3", ""},
		// Hosts × PathPrefixes do not spread to HostPaths' hosts.
		{"www.example.com", "/shop", "web"},
		{"a.apps.example.com", "/shop", ""},
	}
	for _, c := range cases {
		got := ""
		if r, ok := tab.Lookup(c.host, c.path); ok {
			got = r.Value
		}
		if got != c.want {
			t.Errorf("Lookup(%q, %q) = %q, want %q", c.host, c.path, got, c.want)
		}
	}
	if len(tab.Conflicts) != 0 {
		t.Errorf("conflicts: %v", tab.Conflicts)
	}
}

// A host one app lists in its annotation (Hosts) and another app's
// Ingress names (HostPaths) is one claim against another: the older route
// wins on the prefixes they share, whichever field each came from, and
// the younger is told on each.
func TestAnnotationHostAgainstIngressHost(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		name       string
		annotation time.Time // the route listing the host in Hosts
		ingress    time.Time // the route with the host in HostPaths
		want       string
		loser      Key
	}{
		{"annotation older", t0, t0.Add(time.Second), "annotated", Key{"shop", "ingressed"}},
		{"ingress older", t0.Add(time.Second), t0, "ingressed", Key{"shop", "annotated"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			routes := []Route[string]{
				{Key: Key{"shop", "annotated"}, Created: tc.annotation, Value: "annotated", Hosts: []string{"shop.example.com"}},
				{Key: Key{"shop", "ingressed"}, Created: tc.ingress, Value: "ingressed",
					HostPaths: []HostPaths{{Host: "shop.example.com"}, {Host: "shop.example.com", PathPrefixes: []string{"/api"}}}},
			}
			tab := Build(routes, nil)
			if r, ok := tab.Lookup("shop.example.com", "/"); !ok || r.Value != tc.want {
				t.Errorf("Lookup(shop.example.com, /) = %v, %v; want %s", r, ok, tc.want)
			}
			// /api is claimed by the Ingress's app alone.
			if r, ok := tab.Lookup("shop.example.com", "/api/x"); !ok || r.Value != "ingressed" {
				t.Errorf("Lookup(shop.example.com, /api/x) = %v, %v; want ingressed", r, ok)
			}
			winner := Key{"shop", tc.want}
			want := []Conflict{{Host: "shop.example.com", Prefix: "/", Winner: winner, Loser: tc.loser, Reason: ReasonOlderRoute}}
			if d := cmp.Diff(want, tab.Conflicts); d != "" {
				t.Errorf("conflicts (-want +got):\n%s", d)
			}
		})
	}
}

// A host taken from an Ingress of namespace b goes through the tenancy
// rules unchanged: a domain a DomainClaim binds to a, a's cluster domain
// and Service names, and names that are not host names are refused,
// however old b's route is.
func TestIngressHostOfAnotherNamespaceRefused(t *testing.T) {
	t0 := time.Unix(1000, 0)
	routes := []Route[string]{
		{Key: Key{"a", "web"}, Created: t0.Add(time.Hour), Value: "a", Service: "web",
			Hosts: []string{"shop.example.com"}},
		{Key: Key{"b", "squat"}, Created: t0, Value: "b", HostPaths: []HostPaths{
			{Host: "shop.example.com", PathPrefixes: []string{"/api"}},
			{Host: "x.shop.example.com"},
			{Host: "*.shop.example.com"},
			{Host: "web.a.svc.cluster.local"},
			{Host: "api.a.svc", PathPrefixes: []string{"/x"}},
			{Host: "web.a"},
			{Host: "web"},
			{Host: "b.example.com"},
		}},
	}
	tab := Build(routes, Claims{"shop.example.com": "a"})
	for _, c := range []struct{ host, path, want string }{
		{"shop.example.com", "/api", "a"},
		{"x.shop.example.com", "/", ""},
		{"y.shop.example.com", "/", ""},
		{"web.a.svc.cluster.local", "/", "a"},
		{"api.a.svc", "/x", ""},
		{"web.a", "/", "a"},
		{"b.example.com", "/", "b"},
	} {
		got := ""
		if r, ok := tab.Lookup(c.host, c.path); ok {
			got = r.Value
		}
		if got != c.want {
			t.Errorf("Lookup(%q, %q) = %q, want %q", c.host, c.path, got, c.want)
		}
	}
	var got []string
	for _, c := range tab.Conflicts {
		got = append(got, c.Loser.String()+" "+c.Host+" "+c.Prefix+" "+c.Reason)
	}
	want := []string{
		"b/squat shop.example.com /api " + ReasonDomainClaim,
		"b/squat x.shop.example.com / " + ReasonDomainClaim,
		"b/squat *.shop.example.com / " + ReasonDomainClaim,
		"b/squat web.a.svc.cluster.local / " + ReasonClusterName,
		"b/squat api.a.svc /x " + ReasonClusterName,
		"b/squat web.a / " + ReasonServiceName,
		"b/squat web / " + ReasonNotAHostName,
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("conflicts (-want +got):\n%s", d)
	}
}

// TestPrefixMatchesWholePathElements: a path prefix covers a request path
// by whole path elements, as Ingress Prefix and HTTPRoute PathPrefix do
// (and every controller that routes them): team-a's older /api on
// shop.example.com does not take /apiary from team-b's /, which its
// Ingress sends to team-b's Service. A prefix with a trailing slash covers
// the path without it too.
func TestPrefixMatchesWholePathElements(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tab := Build([]Route[string]{
		{Key: Key{"team-a", "api"}, Created: t0, HostPaths: []HostPaths{{Host: "shop.example.com", PathPrefixes: []string{"/api", "/static/", "/v1.0"}}}, Value: "a"},
		{Key: Key{"team-b", "web"}, Created: t0.Add(time.Hour), HostPaths: []HostPaths{{Host: "shop.example.com"}}, Value: "b"},
	}, nil)
	for path, want := range map[string]string{
		"/api": "a", "/api/": "a", "/api/orders": "a", "/apiary": "b", "/api-v2": "b", "/ap": "b",
		"/static": "a", "/static/x.css": "a", "/staticfiles": "b",
		"/v1.0/x": "a", "/v1.01": "b", "/": "b", "": "b",
	} {
		r, ok := tab.Lookup("shop.example.com", path)
		got := ""
		if ok {
			got = r.Value
		}
		if got != want {
			t.Errorf("Lookup(shop.example.com, %q) = %q, want %q", path, got, want)
		}
	}
}
