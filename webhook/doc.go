// Package webhook is ebb's control plane, served by ebb-webhook: the
// admission webhook that injects the counting sidecar into opted-in pods
// (package inject decides what to add), the controller that keeps each
// app's AppRoute in step with its Deployment, and the webhook's TLS
// (certificate files reloaded on change, or a self-signed CA it keeps in a
// Secret and in the webhook configuration's caBundle). Options:
// ebb-webhook -h; the keys users set are in docs/configuration.md.
//
// Invariants:
//   - Admission only injects: it makes no API call and writes nothing, so
//     it is safe under dry run and when the controller is down. The app's
//     RoutePolicy's static responses, which the sidecar gets, come from the
//     manager's cache; a running pod keeps the ones it started with.
//   - The controller, not admission, registers apps: it applies the
//     AppRoute of every Deployment this instance routes (namespace labelled
//     <suffix>/inject=enabled, template labelled <suffix>/app), whatever its
//     replica count, from the pod template, so an app created at zero is
//     routed before its first pod; it deletes the AppRoutes it owns when a
//     label goes.
//   - A pod has at most one sidecar and an app at most one route when
//     several instances select it: the API server calls their webhooks in
//     the order of their configurations' names, the first injects, and each
//     controller leaves an app to another instance whose configuration
//     exists and sorts first. Each instance writes only its own group.
//   - Two Deployments claiming one app name: the older keeps the route, the
//     other gets a Warning event AppNameTaken and takes over when it goes.
//   - An idle fleet costs the controller nothing: every input of a route
//     comes from a watch and the manager's cache (app pods labelled
//     <suffix>/app only, stripped; KEDA's ScaledObjects once its API
//     exists, looked for once a minute until then; RoutePolicies; the
//     metadata of ConfigMaps, whose data is read, one ConfigMap at a time,
//     only when one a policy names has changed), no route is requeued
//     on a timer, and a route or its status is written only when it would
//     change. The elected replica's Lease renewal (every 15 s) is its only
//     write.
package webhook
