// Package webhook is ebb's control plane, served by ebb-webhook: the
// admission webhook that injects the counting sidecar into opted-in pods,
// the controller that creates each app's AppRoute from its Deployment,
// keeps it in step and fills its status, and the webhook's TLS
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
// The app container gets a preStop hook, an httpGet of the sidecar's
// admin path /wait-for-drain, so that a stopping pod serves until traffic
// has moved away (see package sidecar); a container with a preStop hook of
// its own keeps it, and the pod is admitted with a warning saying so.
//
// The AppRoute controller re-reads hosts, paths, port, service, queue-size
// and cold-start-timeout from the Deployment's pod template, so a change
// applies even while the app runs no pod.
//
// # Which Deployments get an AppRoute
//
// The AppRoute controller, not the admission of pods, registers apps: it
// creates (server-side apply, field manager ebb-webhook, owned by the
// Deployment) the AppRoute <app> of every Deployment that this instance
// routes, whatever its replica count, so a Deployment created at zero (with
// a KEDA ScaledObject) is routed before its first pod exists. It watches
// Deployments and Namespaces: labelling a namespace later routes its apps;
// removing the namespace label or the template's app label deletes the
// AppRoutes it owns. The admission webhook only injects: it makes no API
// call and writes nothing, dry run or not.
//
// This instance routes a Deployment when
//
//   - its namespace is labelled <suffix>/inject=enabled,
//   - its pod template carries the label <suffix>/app, and
//   - it is the instance that injects the Deployment's pods.
//
// Several instances may select the same pods: a namespace labelled for two
// suffixes, a template carrying both app labels. The API server calls their
// webhooks in the order of their configurations' names (sidecar-injector.<suffix>);
// the first one injects the sidecar and every later one finds it and leaves
// the pod alone, so a pod has exactly one sidecar. The controller follows the
// same order: an instance recognises another by its labels
// (<other>/inject=enabled on the namespace, <other>/app on the template) and,
// if that instance's webhook configuration exists and sorts first, leaves
// the app to it (and deletes its own AppRoute if it had one). So a
// namespace labelled for ebb.dev and team1.example.com gets AppRoutes in
// both groups, but each app in exactly one: an app labelled for one
// instance is routed by that one, an app labelled for both by ebb.dev, whose
// configuration sorts first. Each instance writes only its own group.
// Another instance's configuration being installed or removed is noticed
// at the next change of the Deployment or namespace, or within a minute.
// One gap remains: if the first instance's webhook is down with
// failurePolicy Ignore, the second injects pods the first still routes.
//
// Two Deployments of one namespace with the same app label value share one
// AppRoute name: the older Deployment (then the first by name) keeps the
// route, the other gets a Warning event AppNameTaken, and takes the route
// over (Normal event AppRouteTakenOver) when the older one goes or is
// renamed. Invalid annotations in a template give a Warning event
// InvalidAnnotations and set the AppRoute's Ready condition to False.
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
