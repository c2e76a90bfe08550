package routing

import (
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
	tab := Build(routes)
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
	want := []Conflict{{Host: "hello.example.com", Prefix: "/", Winner: Key{"shop", "exact"}, Loser: Key{"other", "late"}}}
	if d := cmp.Diff(want, tab.Conflicts); d != "" {
		t.Errorf("conflicts (-want +got):\n%s", d)
	}
}

func TestPrefixesOnlyRestrict(t *testing.T) {
	tab := Build([]Route[int]{{Key: Key{"a", "b"}, Hosts: []string{"x.test"}, PathPrefixes: []string{"/only"}, Value: 1}})
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
	tab := Build[int](nil)
	if _, ok := tab.Lookup("a.b", "/"); ok {
		t.Error("empty table routed")
	}
	// A duplicate key keeps the first.
	tab = Build([]Route[int]{{Key: Key{"a", "b"}, Hosts: []string{"x.test"}, Value: 1}, {Key: Key{"a", "b"}, Hosts: []string{"y.test"}, Value: 2}})
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
	tab := Build(routes)
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := tab.Lookup("deep.x.wild.test:80", "/a/b"); !ok {
			b.Fatal("no route")
		}
	}
}
