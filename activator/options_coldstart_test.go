package activator

import (
	"strings"
	"testing"
	"time"
)

// TestColdStartTimeoutCeiling: --cold-start-timeout takes 1ms to
// MaxColdStartTimeout (15m, the per-app annotation's ceiling too) and
// refuses one step past either end, naming the flag and the range.
func TestColdStartTimeoutCeiling(t *testing.T) {
	if MaxColdStartTimeout != 15*time.Minute {
		t.Fatalf("MaxColdStartTimeout = %v; the chart, the webhook and the docs say 15m", MaxColdStartTimeout)
	}
	for _, tc := range []struct {
		value string
		ok    bool
	}{
		{"1ms", true},
		{"999us", false},
		{"15m", true},
		{"900s", true},
		{"15m1ms", false},
		{"1h", false},
	} {
		o, err := ParseOptions([]string{"--cold-start-timeout=" + tc.value}, func(string) string { return "" })
		if tc.ok {
			if err != nil {
				t.Errorf("--cold-start-timeout=%s refused: %v", tc.value, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("--cold-start-timeout=%s accepted (%v)", tc.value, o.ColdStartTimeout)
			continue
		}
		if !strings.Contains(err.Error(), "--cold-start-timeout ") || !strings.Contains(err.Error(), "want 1ms to 15m0s") {
			t.Errorf("--cold-start-timeout=%s: the error does not name the flag and the range: %v", tc.value, err)
		}
	}
}
