// Package inject is the pure part of ebb's admission webhook: it reads an
// app's label and annotations (ParseApp) and adds the counting sidecar to a
// pod (Inject). Nothing here talks to the API server, so the rules are tested
// by table and fuzzed.
package inject
