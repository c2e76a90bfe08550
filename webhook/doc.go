// Package webhook is ebb's control plane, served by ebb-webhook: the
// admission webhook that injects the counting sidecar into opted-in pods and
// registers each app's AppRoute, the controller that keeps AppRoutes in step
// with their Deployments and fills their status, and the webhook's TLS
// (certificate files reloaded on change, or a self-signed CA it manages).
//
// # Labels and annotations
//
// Every key below is prefixed with the instance's group suffix (ebb.dev by
// default, so "<suffix>/hosts" is "ebb.dev/hosts"). "Pod" means the pod
// template of the app's Deployment. Invalid values make the webhook refuse
// the pod with a message naming the key and the fix.
//
//	| key                         | on              | value                                                                  | default                            |
//	|-----------------------------|-----------------|------------------------------------------------------------------------|------------------------------------|
//	| <suffix>/inject             | Namespace label | "enabled" opts the namespace in                                        | —                                  |
//	| <suffix>/app                | Pod label       | app name (DNS label); opts the pod in and names its AppRoute           | —                                  |
//	| <suffix>/hosts              | Pod annotation  | comma-separated hosts, exact or "*.wildcard", at most 64               | none: only the Service's DNS names |
//	| <suffix>/paths              | Pod annotation  | comma-separated path prefixes starting with "/", at most 64            | every path                         |
//	| <suffix>/port               | Pod annotation  | the app's container port, by name or number                            | the pod's only containerPort       |
//	| <suffix>/service            | Pod annotation  | the Service carrying the app's traffic                                 | the Service whose selector matches |
//	| <suffix>/queue-size         | Pod annotation  | requests an activator holds while the app is at zero, 1 to 1000000     | the activator's default            |
//	| <suffix>/cold-start-timeout | Pod annotation  | how long a held request waits for a ready pod, Go duration in (0, 15m] | the activator's default            |
//	| <suffix>/drain-timeout      | Pod annotation  | how long the sidecar drains on SIGTERM, Go duration in [0, 10m]        | --sidecar-drain-timeout (20s)      |
//	| <suffix>/sidecar            | Pod annotation  | set by the webhook: the image it injected                              | —                                  |
//
// The AppRoute controller re-reads hosts, paths, port, service, queue-size
// and cold-start-timeout from the Deployment's pod template, so a change
// applies even while the app runs no pod. The AppRoute itself is created
// when the first pod of the Deployment is admitted (not on a dry run), so
// only the instance that injected the sidecar routes the app.
//
// # TLS
//
// --tls-mode=files (default) serves tls.crt and tls.key from --cert-dir and
// reloads them when they change (cert-manager writes them through a Secret
// volume; its CA injector sets the caBundle). --tls-mode=self-signed keeps an
// ECDSA P-256 CA (10 years) and serving certificate (1 year, renewed with a
// third of its life left) in the Secret --tls-secret, writes them to
// --cert-dir, and sets the caBundle of the MutatingWebhookConfiguration
// sidecar-injector.<suffix>, checking every --cert-check-interval.
//
// # Metrics
//
//	| name                                             | type      | labels                                      |
//	|--------------------------------------------------|-----------|---------------------------------------------|
//	| ebb_webhook_admission_duration_seconds           | histogram | result: injected, unchanged, refused, error |
//	| ebb_webhook_approute_applies_total               | counter   | result: applied, unchanged, failed          |
//	| ebb_webhook_certificate_expiry_timestamp_seconds | gauge     | — (self-signed mode)                        |
package webhook
