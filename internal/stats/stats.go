package stats

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
)

// Defaults shared by the sidecar, the webhook that injects it and the scaler
// that reads it.
const (
	// DefaultListenPort is where the sidecar takes client traffic.
	DefaultListenPort = 8012
	// DefaultAdminPort serves Path, ReadyPath and /metrics.
	DefaultAdminPort = 8022
	// DefaultDrainTimeout bounds the sidecar's drain after SIGTERM: inside
	// Kubernetes' default terminationGracePeriodSeconds (30) with room for
	// the app's own shutdown.
	DefaultDrainTimeout = 20 * time.Second
	// Path serves a Snapshot in the format below.
	Path = "/stats"
	// ReadyPath answers 200 once the app answers on its port, 503 otherwise
	// and while the sidecar drains.
	ReadyPath = "/ready"
	// WaitForDrainPath is the sidecar's preStop endpoint: it answers once
	// no request has arrived for the drain delay (see package sidecar).
	WaitForDrainPath = "/wait-for-drain"
	// ContentType is the media type of a Snapshot body.
	ContentType = "text/plain; version=ebb1"
)

// Snapshot is one reading of a sidecar's counters.
//
// On the wire it is a single line: "ebb1 <inFlight> <total> <bootID>\n",
// decimal integers separated by one space. InFlight is the number of requests
// being served right now (an open WebSocket counts until it closes); Total is
// the number of requests served since the sidecar started (monotonic);
// BootID changes whenever the sidecar restarts, so a reader can tell a
// counter reset from a decrease.
//
// A reader that asks for Path + V2Query gets, from a sidecar that knows it,
// "ebb2 <inFlight> <total> <bootID> <busyMillis>\n": BusyFor, in whole
// milliseconds, is how long requests have been in flight without a break
// (0 when none is), which bounds the age of the oldest one. A sidecar that
// does not know the query answers ebb1, and Parse reads both.
type Snapshot struct {
	InFlight int64
	Total    uint64
	BootID   uint64
	BusyFor  time.Duration
}

const (
	magic   = "ebb1"
	magicV2 = "ebb2"
	// V2Query asks for the ebb2 line.
	V2Query = "v=2"
)

// Append appends the wire form of s to b and returns the extended slice; it
// does not allocate when b has room.
func (s Snapshot) Append(b []byte) []byte { return s.appendLine(b, false) }

// AppendV2 appends the ebb2 wire form of s to b, as Append does.
func (s Snapshot) AppendV2(b []byte) []byte { return s.appendLine(b, true) }

func (s Snapshot) appendLine(b []byte, v2 bool) []byte {
	if v2 {
		b = append(b, magicV2...)
	} else {
		b = append(b, magic...)
	}
	b = append(b, ' ')
	b = strconv.AppendInt(b, s.InFlight, 10)
	b = append(b, ' ')
	b = strconv.AppendUint(b, s.Total, 10)
	b = append(b, ' ')
	b = strconv.AppendUint(b, s.BootID, 10)
	if v2 {
		b = append(b, ' ')
		b = strconv.AppendInt(b, s.BusyFor.Milliseconds(), 10)
	}
	return append(b, '\n')
}

// ErrFormat is returned by Parse for a body that is not a Snapshot.
var ErrFormat = errors.New("not an ebb1 stats line")

// Parse reads the wire form produced by Append. It accepts a missing final
// newline and rejects anything else that differs.
func Parse(b []byte) (Snapshot, error) {
	if len(b) > 0 && b[len(b)-1] == '\n' {
		b = b[:len(b)-1]
	}
	var fields [5][]byte
	n := 0
	start := 0
	for i := 0; i <= len(b); i++ {
		if i == len(b) || b[i] == ' ' {
			if n == len(fields) {
				return Snapshot{}, fmt.Errorf("%w: too many fields", ErrFormat)
			}
			fields[n] = b[start:i]
			n++
			start = i + 1
		}
	}
	if !(n == 4 && string(fields[0]) == magic || n == 5 && string(fields[0]) == magicV2) {
		return Snapshot{}, fmt.Errorf("%w: %q", ErrFormat, truncate(b))
	}
	inFlight, err := strconv.ParseInt(string(fields[1]), 10, 64)
	if err != nil || inFlight < 0 {
		return Snapshot{}, fmt.Errorf("%w: in-flight %q", ErrFormat, fields[1])
	}
	total, err := strconv.ParseUint(string(fields[2]), 10, 64)
	if err != nil {
		return Snapshot{}, fmt.Errorf("%w: total %q", ErrFormat, fields[2])
	}
	boot, err := strconv.ParseUint(string(fields[3]), 10, 64)
	if err != nil {
		return Snapshot{}, fmt.Errorf("%w: boot id %q", ErrFormat, fields[3])
	}
	snap := Snapshot{InFlight: inFlight, Total: total, BootID: boot}
	if n == 5 {
		ms, err := strconv.ParseInt(string(fields[4]), 10, 64)
		if err != nil || ms < 0 || ms > math.MaxInt64/int64(time.Millisecond) {
			// Beyond ~292 years the Duration would overflow.
			return Snapshot{}, fmt.Errorf("%w: busy %q", ErrFormat, fields[4])
		}
		snap.BusyFor = time.Duration(ms) * time.Millisecond
	}
	return snap, nil
}

func truncate(b []byte) []byte {
	if len(b) > 40 {
		return b[:40]
	}
	return b
}
