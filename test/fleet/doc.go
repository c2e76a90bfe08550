// Package fleet measures ebb with a fleet of apps, for test/bench/fleet and
// the e2e suite's TestFleet: it creates apps as the README's complete
// example writes them (a Deployment at zero, its Service, a ScaledObject
// with ebb's trigger) across namespaces with a bounded worker pool, waits
// for their AppRoutes' conditions, wakes apps and reads ebb's part of each
// cold start from status.lastColdStart, counts API requests and writes per
// client from the API server's audit log, samples the CPU and memory of
// ebb's pods and of the cluster's programs, and counts the Prometheus
// series each component exports.
package fleet
