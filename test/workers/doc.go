// Package workers is the tests' own custom workload kind, Worker
// (workers.example.com, v1): PodSpecable in Knative's sense (spec.template
// is a PodTemplateSpec, spec.selector a LabelSelector) and with the scale
// subresource, so that ebb's "any /scale target" path is exercised by a kind
// ebb has never heard of rather than by Argo Rollouts or the like. The CRD
// is embedded here; the controller that makes a Worker's pods is in
// controller.go.
package workers
