// Package v1alpha1 holds the AppRoute type: ebb's routing table, one object
// per app, naming its hosts, path prefixes, Service and scale target. The API
// group is routing.<suffix>, chosen at run time from the instance's group
// suffix; the markers below name the default group for the generated CRD.
//
// +kubebuilder:object:generate=true
// +groupName=routing.ebb.dev
package v1alpha1
