// Package inject is the pure part of ebb's admission webhook: it reads an
// app's label and annotations (ParseApp) and adds the counting sidecar to a
// pod (Inject). Nothing here talks to the API server, so the rules are tested
// by table and fuzzed.
//
// The sidecar counts every request that reaches its data port, whoever sends
// it, so Inject leaves no kubelet probe or lifecycle hook there: one that
// names the app port (whose name the sidecar takes over) or the sidecar's
// port number, in any container, is pointed at the app's own port number
// (FuzzInject checks that none is left).
package inject
