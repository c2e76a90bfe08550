package sidecarapi

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestStatsWireForm pins the stats line and its Content-Type byte for byte:
// a change here is a new StatsVersion, which the scaler of that release must
// read beside this one (see Snapshot).
func TestStatsWireForm(t *testing.T) {
	for _, tc := range []struct {
		s    Snapshot
		want string
	}{
		{Snapshot{}, "ebb1 0 0 0 0\n"},
		{Snapshot{InFlight: 2, Total: 9, BootID: 5, BusyFor: 95*time.Second + 999*time.Microsecond}, "ebb1 2 9 5 95000\n"},
		{Snapshot{InFlight: math.MaxInt64, Total: math.MaxUint64, BootID: math.MaxUint64, BusyFor: math.MaxInt64},
			"ebb1 9223372036854775807 18446744073709551615 18446744073709551615 9223372036854\n"},
	} {
		if got := string(tc.s.Append(nil)); got != tc.want {
			t.Errorf("Append(%+v) = %q, want %q", tc.s, got, tc.want)
		}
	}
	if StatsContentType != "text/plain; version=ebb1" {
		t.Errorf("StatsContentType = %q", StatsContentType)
	}
	longest := Snapshot{InFlight: math.MaxInt64, Total: math.MaxUint64, BootID: math.MaxUint64, BusyFor: math.MaxInt64}.Append(nil)
	if len(longest) != MaxStatsLine || MaxStatsLine > MaxBody {
		t.Errorf("the longest line has %d bytes; MaxStatsLine %d, MaxBody %d", len(longest), MaxStatsLine, MaxBody)
	}
}

func TestStatsRoundTrip(t *testing.T) {
	for _, s := range []Snapshot{
		{},
		{InFlight: 3, Total: 12345, BootID: 1732230000123456789, BusyFor: 1500 * time.Millisecond},
		{InFlight: 1 << 40, Total: math.MaxUint64, BootID: 7},
		{InFlight: math.MaxInt64, BootID: 1, BusyFor: math.MaxInt64 / time.Millisecond * time.Millisecond},
	} {
		line := s.Append(nil)
		for _, in := range [][]byte{line, bytes.TrimSuffix(line, []byte("\n"))} {
			got, err := ParseSnapshot(in)
			if err != nil {
				t.Fatalf("ParseSnapshot(%q): %v", in, err)
			}
			if diff := cmp.Diff(s, got); diff != "" {
				t.Errorf("round trip of %q (-want +got):\n%s", in, diff)
			}
		}
	}
}

// TestParseSnapshotRefuses: only the line Append writes is read, of this
// version only; another version is named in the error.
func TestParseSnapshotRefuses(t *testing.T) {
	for _, in := range []string{
		"", "\n", "<html>", "ebb1", "ebb1 ",
		// Another version or another layout.
		"ebb2 1 2 3 4", "ebb0 1 2 3 4", "EBB1 1 2 3 4", "ebb1 1 2 3", "ebb2 1 2 3", "ebb1 1 2 3 4 5",
		// Spacing and line ends.
		"ebb1  1 2 3 4", "ebb1 1 2 3 4 ", " ebb1 1 2 3 4", "ebb1 1 2 3 4\r\n", "ebb1 1 2 3 4\n\n", "ebb1\t1 2 3 4",
		// Signs, leading zeros, other spellings.
		"ebb1 -1 2 3 4", "ebb1 +1 2 3 4", "ebb1 -0 2 3 4", "ebb1 01 2 3 4", "ebb1 1 02 3 4", "ebb1 1 2 03 4", "ebb1 1 2 3 04",
		"ebb1 1 2 3 +4", "ebb1 1 2 3 -4", "ebb1 x 2 3 4", "ebb1 1_0 2 3 4", "ebb1 0x1 2 3 4",
		// Out of range.
		"ebb1 9223372036854775808 0 1 0", "ebb1 -9223372036854775808 0 1 0", "ebb1 1 18446744073709551616 1 0", "ebb1 1 2 18446744073709551616 0",
		// 2^63-1 ms would overflow the Duration (it read as -1ms).
		"ebb1 1 9 42 9223372036854775807", "ebb1 1 9 42 9223372036855",
	} {
		if s, err := ParseSnapshot([]byte(in)); !errors.Is(err, ErrFormat) {
			t.Errorf("ParseSnapshot(%q) = %+v, %v; want ErrFormat", in, s, err)
		}
	}
	if _, err := ParseSnapshot([]byte("ebb2 1 2 3 4 5\n")); err == nil || !strings.Contains(err.Error(), `version "ebb2" (this reader reads ebb1 only)`) {
		t.Errorf("ParseSnapshot of an ebb2 line: %v, want the version named", err)
	}
}

func TestAppendDoesNotAllocate(t *testing.T) {
	buf := make([]byte, 0, MaxStatsLine)
	s := Snapshot{InFlight: 10, Total: 1000000, BootID: 99, BusyFor: time.Second}
	if n := testing.AllocsPerRun(100, func() { buf = s.Append(buf[:0]) }); n != 0 {
		t.Errorf("Append allocates %v times", n)
	}
	line := s.Append(nil)
	if n := testing.AllocsPerRun(100, func() { _, _ = ParseSnapshot(line) }); n != 0 {
		t.Errorf("ParseSnapshot allocates %v times", n)
	}
}

// FuzzParseSnapshot: a line ParseSnapshot accepts is the one Append writes
// for what it read, byte for byte (the final newline may be missing).
func FuzzParseSnapshot(f *testing.F) {
	f.Add([]byte("ebb1 1 2 3 4\n"))
	f.Add([]byte("ebb1 9223372036854775807 18446744073709551615 18446744073709551615 9223372036854\n"))
	f.Add([]byte("ebb2 1 2 3 4\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ParseSnapshot(b)
		if err != nil {
			return
		}
		line := s.Append(nil)
		if !bytes.Equal(line, b) && !bytes.Equal(line[:len(line)-1], b) {
			t.Fatalf("ParseSnapshot(%q) = %+v, which Append writes as %q", b, s, line)
		}
	})
}
