// Package groupsuffix derives every name one ebb instance owns from its API
// group suffix: the CRD group, label and annotation keys, the EndpointSlice
// managed-by value and cluster-scoped object names. Two instances with
// different suffixes therefore share no name.
package groupsuffix
