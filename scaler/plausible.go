package scaler

import (
	"fmt"
	"time"

	"github.com/ebb-dev/ebb/internal/sidecarapi"
)

// What the scaler takes from a pod's /stats as plausible. A pod is whatever
// a namespace's user makes it, so its figures are checked before they count:
// a reading outside these bounds is refused, the pod's figure is left out of
// its app for that tick (not even its last value is kept), and the refusal
// is counted (ebb_scaler_sidecar_refused_total{reason}), logged and posted
// as a Warning event StatsRefused on the pod. The next reading is checked
// against the refused one, so one odd reading does not exclude a pod for
// ever.
const (
	// MaxPodInFlight bounds one sidecar's in-flight count: 2^20, far
	// above the connections one pod can hold open (a pod's file-descriptor
	// limit is usually 2^20 at most, and the sidecar holds a client and an
	// app connection per HTTP/1.1 request).
	MaxPodInFlight = 1 << 20
	// MaxPodRate bounds the requests one sidecar can count per second,
	// between two readings or since it started (ebb's sidecar serves well
	// under 10^5 a second on one core; this is ten times more).
	MaxPodRate = 1_000_000
	// MaxBootChanges bounds the sidecar restarts (new boot IDs) one pod
	// may show within BootWindow: the kubelet's crash-loop back-off (10 s
	// doubling to 5 min; 1 s doubling to 1 min with
	// ReduceDefaultCrashLoopBackOffDecay) allows at most 9.
	MaxBootChanges = 10
	// BootWindow is the window of MaxBootChanges.
	BootWindow = 5 * time.Minute
)

// Reasons a reading is refused; label values of
// ebb_scaler_sidecar_refused_total. sidecarapi.ResponseError's reasons (http,
// status, too_long, format) are refusals of the answer itself.
const (
	refusedFormat    = sidecarapi.ReasonFormat // not a stats line of this version (its Content-Type or its body)
	refusedInFlight  = "in_flight"             // above MaxPodInFlight
	refusedBackwards = "counter_backwards"     // the total went down under the same boot ID
	refusedRate      = "rate"                  // more requests counted than MaxPodRate allows
	refusedBootChurn = "boot_churn"            // more than MaxBootChanges boot IDs within BootWindow
)

// plausible checks snap, read at at, against the pod's last accepted or
// refused reading; it returns "" or the reason and what was wrong. It
// updates the boot-ID change count.
func plausible(st *readState, snap sidecarapi.Snapshot, at, seen time.Time, fromZero bool) (reason, msg string) {
	if snap.InFlight > MaxPodInFlight {
		return refusedInFlight, fmt.Sprintf("in-flight count %d is above %d, the most one pod can hold", snap.InFlight, MaxPodInFlight)
	}
	// Requests counted since ref, at most MaxPodRate a second (a second of
	// slack for the reads' own timing).
	within := func(n uint64, ref time.Time, what string) (string, string) {
		secs := at.Sub(ref).Seconds() + 1
		if float64(n) > MaxPodRate*secs {
			return refusedRate, fmt.Sprintf("%d requests counted %s, %.0f s ago: above %d a second", n, what, secs-1, MaxPodRate)
		}
		return "", ""
	}
	switch {
	case !st.have && fromZero:
		return within(snap.Total, seen, "since the pod was first seen")
	case !st.have:
		return "", "" // a baseline: counted before the scaler started
	case snap.BootID != st.last.BootID:
		if at.Sub(time.Unix(0, st.bootSince)) > BootWindow {
			st.bootSince, st.bootChanges = at.UnixNano(), 0
		}
		st.bootChanges++
		if st.bootChanges > MaxBootChanges {
			return refusedBootChurn, fmt.Sprintf("boot ID changed %d times within %s (the sidecar restarting more often than the kubelet restarts a container)", st.bootChanges, BootWindow)
		}
		return within(snap.Total, time.Unix(0, st.lastAt), "since the sidecar restarted")
	case snap.Total < st.last.Total:
		return refusedBackwards, fmt.Sprintf("request total went back from %d to %d with the same boot ID %d", st.last.Total, snap.Total, snap.BootID)
	default:
		return within(snap.Total-st.last.Total, time.Unix(0, st.lastAt), "since the last reading")
	}
}
