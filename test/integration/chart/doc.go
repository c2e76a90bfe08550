// Package chart tests the Helm chart charts/ebb with the helm binary the
// Makefile builds (bin/helm): lint, rendering for the default and a custom
// group suffix, that two instances share no name, the values schema, that
// the chart's flags are the binaries' flags, and, against the local
// cluster's real API server, a server-side dry run of everything it renders
// and SubjectAccessReviews of each component's RBAC.
package chart
