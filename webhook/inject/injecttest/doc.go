// Package injecttest reads an injected container's environment as its
// process gets it: the kubelet expands every env value first, so the
// contract tests of the webhook's env (parsed by the sidecar's own
// parser) expand it too.
package injecttest
