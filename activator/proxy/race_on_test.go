//go:build race

package proxy

// raceEnabled: the race detector is on (it inflates the heap, so size
// tests skip).
const raceEnabled = true
