// Package routing is the activator's host → app routing table: an immutable
// snapshot built from AppRoutes (exact and wildcard hosts, path prefixes, the
// Service's cluster DNS names and ClusterIPs) and swapped atomically, so a
// lookup on the hot path takes no lock and allocates nothing.
package routing
