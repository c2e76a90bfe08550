// Package workload is ebb's view of the workloads it routes and wakes: a
// Deployment, a StatefulSet, or a custom resource of a kind the installer
// lists with --scale-targets (<resource>.<group>), which must be PodSpecable
// (spec.template a PodTemplateSpec, spec.selector a LabelSelector) and have
// the scale subresource, through which KEDA scales it. The webhook and the
// activator read every kind through the one Workload type, so neither
// branches on the kind beyond building it.
package workload
