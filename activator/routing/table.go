package routing

import (
	"cmp"
	"net"
	"slices"
	"strings"
	"time"
)

// Key names one AppRoute (and the app it routes to): namespace and name.
type Key struct {
	Namespace, Name string
}

func (k Key) String() string { return k.Namespace + "/" + k.Name }

// Route is what the table needs of one AppRoute.
type Route[V any] struct {
	Key Key
	// Generation is the AppRoute's metadata.generation this route was built from.
	Generation int64
	// Created orders conflicting routes: the older claim wins.
	Created time.Time
	// Hosts are exact names or "*."-wildcards, as in AppRouteSpec.Hosts.
	Hosts []string
	// PathPrefixes restrict the route; empty means every path.
	PathPrefixes []string
	// Service is the Service's name in Key.Namespace; its cluster DNS names
	// route to the app too. Empty when the AppRoute names none.
	Service string
	// ClusterIPs of the Service, routed like its DNS names.
	ClusterIPs []string
	// Value is what a lookup returns (the activator's per-app state).
	Value V
}

// ClusterDomain is the cluster DNS domain of Service names.
const ClusterDomain = "cluster.local"

type prefixEntry[V any] struct {
	prefix string
	route  *Route[V]
}

// hostEntry holds the routes of one host, longest path prefix first.
type hostEntry[V any] struct {
	prefixes []prefixEntry[V]
}

// Table is an immutable routing table. The zero value and nil route nothing.
type Table[V any] struct {
	exact    map[string]*hostEntry[V]
	wildcard map[string]*hostEntry[V] // keyed by the suffix after "*."
	routes   map[Key]*Route[V]
	// Conflicts lists, for each losing claim, the route that lost and the
	// host and prefix it lost on, so they can be reported.
	Conflicts []Conflict
}

// Conflict is a host and path prefix claimed by two routes; Winner serves it.
type Conflict struct {
	Host, Prefix  string
	Winner, Loser Key
}

// Build makes a table of routes. A host and prefix claimed by several routes
// goes to the oldest (then the smallest namespace/name); the others are
// listed in Conflicts. A Service's short name ("web") is shared by every
// namespace, so it routes only when one route claims it.
func Build[V any](routes []Route[V]) *Table[V] {
	t := &Table[V]{exact: map[string]*hostEntry[V]{}, wildcard: map[string]*hostEntry[V]{}, routes: make(map[Key]*Route[V], len(routes))}
	rs := make([]*Route[V], 0, len(routes))
	for i := range routes {
		r := &routes[i]
		if _, dup := t.routes[r.Key]; dup {
			continue
		}
		t.routes[r.Key] = r
		rs = append(rs, r)
	}
	// Oldest first, so that the first claim of a host and prefix wins.
	slices.SortStableFunc(rs, func(a, b *Route[V]) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return cmp.Or(cmp.Compare(a.Key.Namespace, b.Key.Namespace), cmp.Compare(a.Key.Name, b.Key.Name))
	})
	shortNames := map[string]int{}
	for _, r := range rs {
		if r.Service != "" {
			shortNames[r.Service]++
		}
	}
	for _, r := range rs {
		prefixes := r.PathPrefixes
		if len(prefixes) == 0 {
			prefixes = []string{"/"}
		}
		claim := func(m map[string]*hostEntry[V], host string) {
			e := m[host]
			if e == nil {
				e = &hostEntry[V]{}
				m[host] = e
			}
			for _, p := range prefixes {
				if i := slices.IndexFunc(e.prefixes, func(pe prefixEntry[V]) bool { return pe.prefix == p }); i >= 0 {
					if e.prefixes[i].route != r {
						t.Conflicts = append(t.Conflicts, Conflict{Host: host, Prefix: p, Winner: e.prefixes[i].route.Key, Loser: r.Key})
					}
					continue
				}
				e.prefixes = append(e.prefixes, prefixEntry[V]{prefix: p, route: r})
			}
		}
		for _, h := range r.Hosts {
			h = normalizeHost(h)
			if suffix, ok := strings.CutPrefix(h, "*."); ok {
				claim(t.wildcard, suffix)
			} else if h != "" {
				claim(t.exact, h)
			}
		}
		if r.Service != "" {
			base := r.Service + "." + r.Key.Namespace
			for _, h := range []string{base, base + ".svc", base + ".svc." + ClusterDomain} {
				claim(t.exact, h)
			}
			if shortNames[r.Service] == 1 {
				claim(t.exact, r.Service)
			}
		}
		for _, ip := range r.ClusterIPs {
			if ip != "" && ip != "None" {
				claim(t.exact, strings.Trim(strings.ToLower(ip), "[]"))
			}
		}
	}
	for _, m := range []map[string]*hostEntry[V]{t.exact, t.wildcard} {
		for _, e := range m {
			slices.SortStableFunc(e.prefixes, func(a, b prefixEntry[V]) int { return cmp.Compare(len(b.prefix), len(a.prefix)) })
		}
	}
	return t
}

// Lookup finds the route of a request by its Host (with or without port,
// any case, trailing dot allowed) and path: an exact host wins over a
// wildcard, a longer wildcard suffix over a shorter one, and within a host
// the longest path prefix wins.
func (t *Table[V]) Lookup(host, path string) (*Route[V], bool) {
	if t == nil {
		return nil, false
	}
	host = hostOnly(host)
	if e, ok := t.exact[host]; ok {
		if r := e.match(path); r != nil {
			return r, true
		}
	}
	// *.example.com matches a.example.com and a.b.example.com; the most
	// specific wildcard wins.
	for rest := host; ; {
		i := strings.IndexByte(rest, '.')
		if i < 0 {
			return nil, false
		}
		rest = rest[i+1:]
		if e, ok := t.wildcard[rest]; ok {
			if r := e.match(path); r != nil {
				return r, true
			}
		}
	}
}

// Route returns the route of an AppRoute.
func (t *Table[V]) Route(k Key) (*Route[V], bool) {
	if t == nil {
		return nil, false
	}
	r, ok := t.routes[k]
	return r, ok
}

// Routes calls fn for every route, in no order.
func (t *Table[V]) Routes(fn func(*Route[V])) {
	if t == nil {
		return
	}
	for _, r := range t.routes {
		fn(r)
	}
}

// Len is the number of routes.
func (t *Table[V]) Len() int {
	if t == nil {
		return 0
	}
	return len(t.routes)
}

func (e *hostEntry[V]) match(path string) *Route[V] {
	if path == "" {
		path = "/"
	}
	for _, p := range e.prefixes {
		if strings.HasPrefix(path, p.prefix) {
			return p.route
		}
	}
	return nil
}

// hostOnly lowercases a Host header and strips its port and trailing dot,
// without allocating when it is already lower case.
func hostOnly(h string) string {
	if strings.HasPrefix(h, "[") { // [v6]:port
		if i := strings.IndexByte(h, ']'); i > 0 {
			h = h[1:i]
		}
	} else if i := strings.LastIndexByte(h, ':'); i >= 0 && strings.IndexByte(h, ':') == i {
		h = h[:i]
	}
	h = strings.TrimSuffix(h, ".")
	for i := 0; i < len(h); i++ {
		if c := h[i]; 'A' <= c && c <= 'Z' {
			return strings.ToLower(h)
		}
	}
	return h
}

func normalizeHost(h string) string {
	h = strings.TrimSuffix(strings.ToLower(strings.TrimSpace(h)), ".")
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	return h
}
