// Package webhooktest starts what the webhook's integration tests and its
// benchmark need: a real kube-apiserver (envtest) with the AppRoute CRD of
// any group suffix, and ebb-webhook instances it calls over TLS.
package webhooktest
