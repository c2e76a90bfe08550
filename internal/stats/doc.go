// Package stats is the wire format of a sidecar's counters, as served on its
// admin port and read by the scaler every tick. It is one short text line so
// that thousands of pods can be read per second for a few hundred bytes each,
// and it depends on nothing but the standard library (the sidecar links it).
package stats
