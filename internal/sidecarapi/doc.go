// Package sidecarapi is the sidecar's contract with the rest of ebb: the
// ports and admin paths the webhook wires into a pod and the activator,
// the scaler and ebb-check call, and the stats line a sidecar serves on
// StatsPath, with the bounded reader of that answer the scaler uses every
// tick. The line is one short, versioned text line so that thousands of pods
// can be read per second for a few hundred bytes each; the package depends
// on nothing but the standard library, since the sidecar links it.
package sidecarapi
