package activator

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestRouteTimeoutDefaults: the defaults of the route timeouts as the
// chart passes them (none for a whole exchange, 10m for a response head,
// 1h of silence for a stream), and a negative one refused naming its flag.
func TestRouteTimeoutDefaults(t *testing.T) {
	o, err := ParseOptions(nil, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	got := []time.Duration{o.RequestTimeout, o.ResponseHeaderTimeout, o.StreamIdleTimeout}
	if d := cmp.Diff([]time.Duration{0, 10 * time.Minute, time.Hour}, got); d != "" {
		t.Errorf("defaults (-want +got):\n%s", d)
	}
	o, err = ParseOptions([]string{"--request-timeout=0s", "--response-header-timeout=10m", "--stream-idle-timeout=1h"}, func(string) string { return "" })
	if err != nil {
		t.Errorf("the chart's defaults refused: %v", err)
	}
	_, err = ParseOptions([]string{"--request-timeout=-1s", "--response-header-timeout=-1s", "--stream-idle-timeout=-1s"}, func(string) string { return "" })
	for _, f := range []string{"--request-timeout -1s", "--response-header-timeout -1s", "--stream-idle-timeout -1s"} {
		if err == nil || !strings.Contains(err.Error(), f) {
			t.Errorf("%s: not refused by name: %v", f, err)
		}
	}
}
