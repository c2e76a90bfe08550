// Package readiness is the app's own readiness check in a form ebb-sidecar
// runs without client-go: the webhook turns the app container's readiness
// probe (httpGet or tcpSocket) into a Check, and the sidecar runs it itself,
// sub-second while the app is not ready, so that a held request is released
// only to a pod whose app says it is ready, without waiting on the kubelet's
// probe period.
package readiness
