package sidecarapi

import "time"

// Defaults shared by the sidecar, the webhook that injects it, and the
// activator, scaler and ebb-check that call it.
const (
	// DefaultListenPort is where the sidecar takes client traffic.
	DefaultListenPort = 8012
	// DefaultAdminPort serves StatsPath, ReadyPath, WaitForDrainPath and
	// /metrics.
	DefaultAdminPort = 8022
	// DefaultDrainTimeout bounds the sidecar's drain after SIGTERM: inside
	// Kubernetes' default terminationGracePeriodSeconds (30) with room for
	// the app's own shutdown.
	DefaultDrainTimeout = 20 * time.Second
)

// The sidecar's admin paths.
const (
	// StatsPath serves a Snapshot as one stats line (see Snapshot), with
	// Content-Type StatsContentType.
	StatsPath = "/stats"
	// ReadyPath answers 200 once the app answers on its port, 503 otherwise
	// and while the sidecar drains.
	ReadyPath = "/ready"
	// WaitForDrainPath is the sidecar's preStop endpoint: it answers once
	// no request has arrived for the drain delay (see package sidecar).
	WaitForDrainPath = "/wait-for-drain"
)
