package stats

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestRoundTrip(t *testing.T) {
	for _, s := range []Snapshot{{}, {InFlight: 3, Total: 12345, BootID: 1732230000123456789}, {InFlight: 1 << 40, Total: ^uint64(0), BootID: 7}} {
		got, err := Parse(s.Append(nil))
		if err != nil {
			t.Fatalf("Parse(Append(%+v)): %v", s, err)
		}
		if diff := cmp.Diff(s, got); diff != "" {
			t.Errorf("round trip (-want +got):\n%s", diff)
		}
	}
}

func TestWireForm(t *testing.T) {
	if got, want := string(Snapshot{InFlight: 2, Total: 9, BootID: 5}.Append(nil)), "ebb1 2 9 5\n"; got != want {
		t.Errorf("Append = %q, want %q", got, want)
	}
}

func TestParseRejects(t *testing.T) {
	for _, in := range []string{"", "\n", "ebb1 1 2", "ebb1 1 2 3 4", "ebb2 1 2 3", "ebb1 -1 2 3", "ebb1 x 2 3", "ebb1 1 -2 3", "ebb1  1 2 3", "<html>",
		"ebb1 9223372036854775808 0 1", "ebb1 -9223372036854775808 0 1", "ebb1 1 18446744073709551616 1", "ebb1 1 2 18446744073709551616"} {
		if _, err := Parse([]byte(in)); !errors.Is(err, ErrFormat) {
			t.Errorf("Parse(%q) error = %v, want ErrFormat", in, err)
		}
	}
}

func TestAppendDoesNotAllocate(t *testing.T) {
	buf := make([]byte, 0, 128)
	s := Snapshot{InFlight: 10, Total: 1000000, BootID: 99}
	if n := testing.AllocsPerRun(100, func() { buf = s.Append(buf[:0]) }); n != 0 {
		t.Errorf("Append allocates %v times", n)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("ebb1 1 2 3\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := Parse(b)
		if err != nil {
			return
		}
		// ebb2 carries every field; ebb1 all but BusyFor (an ebb2 line
		// re-emitted as ebb1 drops it, by design).
		again, err := Parse(s.AppendV2(nil))
		if err != nil || again != s {
			t.Fatalf("reparse of %+v as ebb2: %+v, %v", s, again, err)
		}
		v1 := s
		v1.BusyFor = 0
		if again, err := Parse(s.Append(nil)); err != nil || again != v1 {
			t.Fatalf("reparse of %+v as ebb1: %+v, %v", s, again, err)
		}
	})
}

// TestV2: the ebb2 line carries BusyFor; each magic has its own field
// count, so neither form is read as the other.
func TestV2(t *testing.T) {
	s := Snapshot{InFlight: 1, Total: 9, BootID: 42, BusyFor: 95 * time.Second}
	line := s.AppendV2(nil)
	if string(line) != "ebb2 1 9 42 95000\n" {
		t.Fatalf("AppendV2 = %q", line)
	}
	got, err := Parse(line)
	if err != nil || got != s {
		t.Errorf("Parse(%q) = %+v, %v", line, got, err)
	}
	for _, bad := range []string{"ebb1 1 9 42 95000", "ebb2 1 9 42", "ebb2 1 9 42 -1", "ebb2 1 9 42 x",
		// 2^63-1 ms would overflow the Duration (it read as -1ms).
		"ebb2 1 9 42 9223372036854775807", "ebb2 1 9 42 9223372036855"} {
		if _, err := Parse([]byte(bad)); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}
