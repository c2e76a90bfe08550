package fleet

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestAuditLast(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	line := func(id, stage, at string) string {
		return `{"auditID":"` + id + `","stage":"` + stage + `","verb":"update","user":{"username":"system:serviceaccount:ebb:ebb-activator"},"objectRef":{"resource":"leases"},"requestReceivedTimestamp":"` + at + `"}` + "\n"
	}
	log := line("a", "ResponseComplete", "2026-11-26T08:00:02.000000Z") +
		line("b", "ResponseComplete", "2026-11-26T08:00:01.000000Z") +
		`{"auditID":"c","stage":"ResponseCo` // a partial line: not yet read
	if err := os.WriteFile(path, []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	a := NewAudit(path)
	if !a.Last().IsZero() {
		t.Errorf("Last() before Advance = %s, want zero", a.Last())
	}
	if err := a.Advance(); err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2026, 11, 26, 8, 0, 2, 0, time.UTC); !a.Last().Equal(want) {
		t.Errorf("Last() = %s, want %s (the latest received, not the last logged)", a.Last(), want)
	}
	rates := a.Window(time.Date(2026, 11, 26, 8, 0, 0, 0, time.UTC), time.Date(2026, 11, 26, 8, 0, 3, 0, time.UTC))
	if c := rates["system:serviceaccount:ebb:ebb-activator"]; c == nil || c.LeaseWrites != 2 {
		t.Errorf("Window: %+v, want 2 Lease writes by the activator", c)
	}
}
