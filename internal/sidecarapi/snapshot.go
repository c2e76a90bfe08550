package sidecarapi

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
)

// The version of the stats line, first in the line and in its Content-Type.
const (
	// StatsVersion names the layout of the stats line described at Snapshot.
	StatsVersion = "ebb1"
	// StatsContentType is the media type of the stats line; a reader
	// refuses any other (ReadResponse does).
	StatsContentType = "text/plain; version=" + StatsVersion
)

// Snapshot is one reading of a sidecar's counters.
//
// On the wire it is one line: StatsVersion and four decimal integers, each
// after one space,
//
//	ebb1 <inFlight> <total> <bootID> <busyMillis>\n
//
// InFlight is the number of requests being served right now (an open
// WebSocket counts until it closes); Total is the number of requests served
// since the sidecar started (monotonic); BootID changes whenever the sidecar
// restarts, so a reader can tell a counter reset from a decrease; BusyFor,
// in whole milliseconds, is how long requests have been in flight without a
// break (0 when none is), which bounds the age of the oldest one.
//
// ParseSnapshot reads this version only and refuses any other. A later
// layout gets the next version, in the line and in StatsContentType; since a
// sidecar is replaced only when its app's pods restart, the scaler that
// brings it must read both.
type Snapshot struct {
	InFlight int64
	Total    uint64
	BootID   uint64
	BusyFor  time.Duration
}

// Append appends the stats line of s to b and returns the extended slice;
// it does not allocate when b has room.
func (s Snapshot) Append(b []byte) []byte {
	b = append(b, StatsVersion...)
	b = append(b, ' ')
	b = strconv.AppendInt(b, s.InFlight, 10)
	b = append(b, ' ')
	b = strconv.AppendUint(b, s.Total, 10)
	b = append(b, ' ')
	b = strconv.AppendUint(b, s.BootID, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, s.BusyFor.Milliseconds(), 10)
	return append(b, '\n')
}

// ErrFormat is returned by ParseSnapshot for a body that is not a stats line
// of StatsVersion.
var ErrFormat = errors.New("not an " + StatsVersion + " stats line")

// ParseSnapshot reads the stats line Append writes. It accepts a missing
// final newline and refuses anything else that differs: another version, a
// field more or less, a figure out of range, a sign or a leading zero.
func ParseSnapshot(b []byte) (Snapshot, error) {
	b, _ = bytes.CutSuffix(b, []byte{'\n'})
	version, rest, _ := bytes.Cut(b, []byte{' '})
	if string(version) != StatsVersion {
		if bytes.HasPrefix(version, []byte("ebb")) {
			return Snapshot{}, fmt.Errorf("%w: version %q (this reader reads %s only)", ErrFormat, clip(version), StatsVersion)
		}
		return Snapshot{}, fmt.Errorf("%w: %q", ErrFormat, clip(b))
	}
	var fields [4][]byte
	n := 0
	for i, start := 0, 0; i <= len(rest); i++ {
		if i == len(rest) || rest[i] == ' ' {
			if n == len(fields) {
				break
			}
			fields[n] = rest[start:i]
			n++
			start = i + 1
		}
	}
	if n != len(fields) || len(b) > MaxStatsLine {
		return Snapshot{}, fmt.Errorf("%w: not %s and %d figures: %q", ErrFormat, StatsVersion, len(fields), clip(b))
	}
	inFlight, err := strconv.ParseInt(string(fields[0]), 10, 64)
	if err != nil || inFlight < 0 {
		return Snapshot{}, fmt.Errorf("%w: in-flight %q", ErrFormat, clip(fields[0]))
	}
	total, err := strconv.ParseUint(string(fields[1]), 10, 64)
	if err != nil {
		return Snapshot{}, fmt.Errorf("%w: total %q", ErrFormat, clip(fields[1]))
	}
	boot, err := strconv.ParseUint(string(fields[2]), 10, 64)
	if err != nil {
		return Snapshot{}, fmt.Errorf("%w: boot id %q", ErrFormat, clip(fields[2]))
	}
	// Beyond ~292 years of milliseconds the Duration would overflow.
	ms, err := strconv.ParseInt(string(fields[3]), 10, 64)
	if err != nil || ms < 0 || ms > math.MaxInt64/int64(time.Millisecond) {
		return Snapshot{}, fmt.Errorf("%w: busy %q", ErrFormat, clip(fields[3]))
	}
	s := Snapshot{InFlight: inFlight, Total: total, BootID: boot, BusyFor: time.Duration(ms) * time.Millisecond}
	// One spelling of each figure, Append's: no sign, no leading zero,
	// nothing after the last figure.
	var canon [MaxStatsLine]byte
	if line := s.Append(canon[:0]); !bytes.Equal(line[:len(line)-1], b) {
		return Snapshot{}, fmt.Errorf("%w: %q is not spelled as the sidecar writes it (a sign, a leading zero, a field more)", ErrFormat, clip(b))
	}
	return s, nil
}

// MaxStatsLine is the length of the longest stats line, newline included.
const MaxStatsLine = len(StatsVersion) + len(" 9223372036854775807 18446744073709551615 18446744073709551615 9223372036854\n")
