// Package activator holds the activator's integration tests on the local
// cluster (package test/cluster): two activator instances (ebb.dev and
// team1.example.com) run as pods with in-cluster configuration, and the
// tests check the endpoint hand-off, holding through the Service's
// ClusterIP, and the Propagated condition.
package activator
