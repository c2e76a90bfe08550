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
	// PathPrefixes restrict the route's Hosts; empty means every path.
	PathPrefixes []string
	// HostPaths are hosts with path prefixes of their own (AppRouteSpec's
	// hostPaths), each claimed on its own by the same rules as Hosts. A
	// host in both Hosts and HostPaths is claimed with both sets of
	// prefixes.
	HostPaths []HostPaths
	// Service is the Service's name in Key.Namespace; its cluster DNS names
	// route to the app too. Empty when the AppRoute names none.
	Service string
	// ClusterIPs of the Service, routed like its DNS names.
	ClusterIPs []string
	// Value is what a lookup returns (the activator's per-app state).
	Value V
}

// HostPaths is a host with its own path prefixes; empty PathPrefixes mean
// every path.
type HostPaths struct {
	Host         string
	PathPrefixes []string
}

// ClusterDomain is the cluster DNS domain of Service names.
const ClusterDomain = "cluster.local"

// everyPath is the prefix of a claim without prefixes.
var everyPath = []string{"/"}

type prefixEntry[V any] struct {
	prefix string
	route  *Route[V]
}

// hostEntry holds the routes of one host, longest path prefix first.
type hostEntry[V any] struct {
	prefixes []prefixEntry[V]
	// owner is the route whose Service this host names (a cluster name,
	// the short name or a ClusterIP): no route of another namespace serves
	// it, on any path, exact or wildcard.
	owner *Route[V]
}

// Table is an immutable routing table. The zero value and nil route nothing.
type Table[V any] struct {
	exact    map[string]*hostEntry[V]
	wildcard map[string]*hostEntry[V] // keyed by the suffix after "*."
	routes   map[Key]*Route[V]
	claims   Claims
	// Conflicts lists, for each losing claim, the route that lost and the
	// host and prefix it lost on, so they can be reported.
	Conflicts []Conflict
}

// Conflict is a host and path prefix that Loser claims and does not serve:
// Winner serves it instead (when another route does), and Reason says why.
type Conflict struct {
	Host, Prefix  string
	Winner, Loser Key
	Reason        string
}

// Why a route does not serve a host it claims (Conflict.Reason).
const (
	// ReasonOlderRoute: an older route of the same standing claims the host
	// and prefix.
	ReasonOlderRoute = "ClaimedByOlderRoute"
	// ReasonServiceName: the host is a Service's cluster name or ClusterIP,
	// which route only to the Service's own namespace.
	ReasonServiceName = "ServiceOfAnotherNamespace"
	// ReasonClusterName: the host is in the cluster domain (x.<ns>.svc,
	// x.<ns>.svc.cluster.local, ...) of another namespace, or covers it.
	ReasonClusterName = "ClusterNameOfAnotherNamespace"
	// ReasonDomainClaim: a DomainClaim binds the host's domain to another
	// namespace.
	ReasonDomainClaim = "DomainClaimedByAnotherNamespace"
	// ReasonNotAHostName: an IP literal or a single-label name, which only a
	// Service's own ClusterIP and short name may be.
	ReasonNotAHostName = "NotAHostName"
)

// Claims binds domains to namespaces (a cluster admin's DomainClaims): the
// key is a lowercase domain, the value the only namespace whose routes may
// claim it or any name under it; the most specific claim of a name decides.
type Claims map[string]string

// Build makes a table of routes. A namespace's own names go to that
// namespace only, whatever another route claims or how old it is: first
// every Service's cluster DNS names and ClusterIPs are claimed by the routes
// that name the Service, then the routes' hosts (Hosts with PathPrefixes,
// and each of HostPaths with its own prefixes), and a host is skipped
// (listed in Conflicts with its reason) when it is an IP literal or a
// single label, lies in another namespace's part of the cluster domain, or
// is bound by claims to another namespace. A host and prefix claimed by
// several routes goes to the oldest (then the smallest namespace/name); the
// others are listed in Conflicts. A Service's short name ("web") is shared
// by every namespace, so it routes only when one route claims it.
func Build[V any](routes []Route[V], claims Claims) *Table[V] {
	t := &Table[V]{exact: map[string]*hostEntry[V]{}, wildcard: map[string]*hostEntry[V]{}, routes: make(map[Key]*Route[V], len(routes))}
	for d, ns := range claims {
		if d = normalizeHost(d); d != "" && ns != "" && !inClusterDomain(d) {
			if t.claims == nil {
				t.claims = Claims{}
			}
			t.claims[d] = ns
		}
	}
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
	// claim gives host and prefixes (nil: every path) to r unless taken;
	// service marks a Service's own name.
	claim := func(r *Route[V], m map[string]*hostEntry[V], host string, prefixes []string, service bool) {
		if len(prefixes) == 0 {
			prefixes = everyPath
		}
		e := m[host]
		if e == nil {
			e = &hostEntry[V]{}
			m[host] = e
		}
		if service && e.owner == nil {
			e.owner = r
		}
		if o := e.owner; o != nil && o.Key.Namespace != r.Key.Namespace {
			for _, p := range prefixes {
				t.Conflicts = append(t.Conflicts, Conflict{Host: host, Prefix: p, Winner: o.Key, Loser: r.Key, Reason: ReasonServiceName})
			}
			return
		}
		for _, p := range prefixes {
			if i := slices.IndexFunc(e.prefixes, func(pe prefixEntry[V]) bool { return pe.prefix == p }); i >= 0 {
				if w := e.prefixes[i]; w.route != r {
					t.Conflicts = append(t.Conflicts, Conflict{Host: host, Prefix: p, Winner: w.route.Key, Loser: r.Key, Reason: ReasonOlderRoute})
				}
				continue
			}
			e.prefixes = append(e.prefixes, prefixEntry[V]{prefix: p, route: r})
		}
	}
	refuse := func(r *Route[V], host string, prefixes []string, reason string) {
		if len(prefixes) == 0 {
			prefixes = everyPath
		}
		for _, p := range prefixes {
			t.Conflicts = append(t.Conflicts, Conflict{Host: host, Prefix: p, Loser: r.Key, Reason: reason})
		}
	}
	// A namespace's own names first, whatever the age of other claims.
	for _, r := range rs {
		if r.Service != "" {
			base := r.Service + "." + r.Key.Namespace
			for _, h := range []string{base, base + ".svc", base + ".svc." + ClusterDomain} {
				claim(r, t.exact, h, r.PathPrefixes, true)
			}
			if shortNames[r.Service] == 1 {
				claim(r, t.exact, r.Service, r.PathPrefixes, true)
			}
		}
		for _, ip := range r.ClusterIPs {
			if ip != "" && ip != "None" {
				claim(r, t.exact, strings.Trim(strings.ToLower(ip), "[]"), r.PathPrefixes, true)
			}
		}
	}
	// Then every route's hosts, oldest route first; within a route its
	// Hosts × PathPrefixes, then its HostPaths.
	claimHost := func(r *Route[V], h string, prefixes []string) {
		h = normalizeHost(h)
		if h == "" {
			return
		}
		name, wild := strings.CutPrefix(h, "*.")
		if reason := t.refusal(name, wild, r.Key.Namespace); reason != "" {
			refuse(r, h, prefixes, reason)
			return
		}
		if wild {
			claim(r, t.wildcard, name, prefixes, false)
		} else {
			claim(r, t.exact, name, prefixes, false)
		}
	}
	for _, r := range rs {
		for _, h := range r.Hosts {
			claimHost(r, h, r.PathPrefixes)
		}
		for _, hp := range r.HostPaths {
			claimHost(r, hp.Host, hp.PathPrefixes)
		}
	}
	for _, m := range []map[string]*hostEntry[V]{t.exact, t.wildcard} {
		for _, e := range m {
			slices.SortStableFunc(e.prefixes, func(a, b prefixEntry[V]) int { return cmp.Compare(len(b.prefix), len(a.prefix)) })
		}
	}
	return t
}

// refusal is why a route of namespace ns may not claim name (the part after
// "*." of a wildcard), or "".
func (t *Table[V]) refusal(name string, wild bool, ns string) string {
	if net.ParseIP(name) != nil || !strings.Contains(name, ".") || NumericTLD(name) {
		return ReasonNotAHostName
	}
	if owner, ok := ClusterDomainNamespace(name); ok && owner != ns {
		return ReasonClusterName
	}
	if owner, ok := t.claimOf(name); ok && owner != ns {
		return ReasonDomainClaim
	}
	return ""
}

// ClusterDomainNamespace reports whether name lies in the cluster's own DNS
// names and which namespace owns it. Under "cluster.local", the label
// before "svc" or "pod" names the namespace, and a name no namespace owns
// (cluster.local, svc.cluster.local, ...) gives "". A cluster may have
// another domain, so under any domain a name with a "svc" or "pod" label
// after at least one other (api.shop.svc.corp.example) belongs to the
// namespace that label follows.
func ClusterDomainNamespace(name string) (string, bool) {
	if rest, ok := strings.CutSuffix(name, "."+ClusterDomain); ok || name == ClusterDomain {
		if !ok {
			return "", true
		}
		if ns, ok := namespaceBefore(rest); ok {
			return ns, true
		}
		return "", true
	}
	if ns, ok := namespaceBefore(name); ok {
		return ns, true
	}
	return "", false
}

// namespaceBefore finds the last "svc" or "pod" label of name that follows
// another label, and returns that label.
func namespaceBefore(name string) (string, bool) {
	labels := strings.Split(name, ".")
	for i := len(labels) - 1; i >= 1; i-- {
		if labels[i] == "svc" || labels[i] == "pod" {
			return labels[i-1], true
		}
	}
	return "", false
}

// NumericTLD reports whether name's last label is all digits: no top-level
// domain is, and URL parsers read such a host as an IPv4 address.
func NumericTLD(name string) bool {
	last := name[strings.LastIndexByte(name, '.')+1:]
	if last == "" {
		return false
	}
	for i := 0; i < len(last); i++ {
		if last[i] < '0' || last[i] > '9' {
			return false
		}
	}
	return true
}

func inClusterDomain(name string) bool {
	return name == ClusterDomain || strings.HasSuffix(name, "."+ClusterDomain)
}

// claimOf finds the most specific domain claim that covers name.
func (t *Table[V]) claimOf(name string) (string, bool) {
	if len(t.claims) == 0 {
		return "", false
	}
	for rest := name; ; {
		if ns, ok := t.claims[rest]; ok {
			return ns, true
		}
		i := strings.IndexByte(rest, '.')
		if i < 0 {
			return "", false
		}
		rest = rest[i+1:]
	}
}

// Lookup finds the route of a request by its Host (with or without port,
// any case, trailing dot allowed) and path: an exact host wins over a
// wildcard, a longer wildcard suffix over a shorter one, and within a host
// the longest path prefix that covers the path by whole elements
// (PrefixCovers) wins.
func (t *Table[V]) Lookup(host, path string) (*Route[V], bool) {
	if t == nil {
		return nil, false
	}
	host = hostOnly(host)
	var owner *Route[V]
	if e, ok := t.exact[host]; ok {
		if r := e.match(path); r != nil {
			return r, true
		}
		owner = e.owner
	}
	if NumericTLD(host) {
		return nil, false // an IP address: no wildcard covers it
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
				// A Service's name goes to its own namespace only, on every
				// path; a name under the wildcard may be bound to another
				// namespace more specifically than the wildcard itself.
				if owner != nil && owner.Key.Namespace != r.Key.Namespace {
					return nil, false
				}
				if ns, ok := t.claimOf(host); ok && ns != r.Key.Namespace {
					return nil, false
				}
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
		if PrefixCovers(p.prefix, path) {
			return p.route
		}
	}
	return nil
}

// PrefixCovers reports whether path prefix p covers path by whole path
// elements, as Ingress Prefix and HTTPRoute PathPrefix match: "/" covers
// every path, /api covers /api and /api/x but not /apiary, and /api/
// covers /api, /api/ and /api/x.
func PrefixCovers(p, path string) bool {
	if p == "/" {
		return true
	}
	if !strings.HasPrefix(path, p) {
		return len(p) > 1 && p[len(p)-1] == '/' && path == p[:len(p)-1]
	}
	return len(path) == len(p) || p[len(p)-1] == '/' || path[len(p)] == '/'
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
	return strings.Trim(h, "[]")
}
