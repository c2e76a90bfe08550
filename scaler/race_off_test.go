//go:build !race

package scaler

const raceEnabled = false
