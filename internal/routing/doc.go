// Package routing is the activator's host → app routing table: an immutable
// snapshot built from AppRoutes (exact and wildcard hosts, path prefixes, the
// Service's cluster DNS names and ClusterIPs) and swapped atomically, so a
// lookup on the hot path takes no lock and allocates nothing.
//
// Invariants (the tenant isolation a shared activator depends on):
//   - A Service's cluster names and ClusterIPs route only to the routes of
//     its own namespace, on every path, exact or wildcard, however old a
//     route of another namespace that lists them is.
//   - A host that is an IP literal (or whose last label is numeric), a
//     single label, or a name in another namespace's part of the cluster
//     domain (x.<ns>.svc, x.<ns>.pod, ... under any cluster domain) is never
//     routed to a route that lists it; Conflicts says why.
//   - Claims (DomainClaims) bind a domain and the names under it to one
//     namespace; the most specific claim of a name decides, before age.
//   - Otherwise the oldest route that lists a host and path prefix serves
//     it, and the longest prefix wins. A prefix covers a path by whole
//     path elements (/api covers /api/x, not /apiary), as Ingress Prefix
//     and HTTPRoute PathPrefix match, so that a request reaches at zero the
//     app its ingress sends it to.
package routing
