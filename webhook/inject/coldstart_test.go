package inject

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// TestColdStartTimeoutCeiling: the cold-start-timeout annotation takes up to
// MaxColdStartTimeout (15m, the activator's ceiling too) and refuses one
// millisecond more, naming the annotation and the ceiling.
func TestColdStartTimeoutCeiling(t *testing.T) {
	if MaxColdStartTimeout != 15*time.Minute {
		t.Fatalf("MaxColdStartTimeout = %v; the chart, the activator and the docs say 15m", MaxColdStartTimeout)
	}
	for _, tc := range []struct {
		value string
		want  time.Duration // 0: refused
	}{
		{"1ms", time.Millisecond},
		{"15m", 15 * time.Minute},
		{"900s", 15 * time.Minute},
		{"15m1ms", 0},
		{"16m", 0},
		{"1h", 0},
		{"0s", 0},
	} {
		p := appPod(func(p *corev1.Pod) { p.Annotations["ebb.dev/cold-start-timeout"] = tc.value })
		app, err := ParseApp(p.Namespace, &p.ObjectMeta, &p.Spec, testCfg)
		if tc.want > 0 {
			if err != nil || app.ColdStartTimeout != tc.want {
				t.Errorf("cold-start-timeout %q: %v, %v; want %v", tc.value, app.ColdStartTimeout, err, tc.want)
			}
			continue
		}
		var refusal *RefusalError
		if !errors.As(err, &refusal) {
			t.Errorf("cold-start-timeout %q: %v, %v; want a refusal", tc.value, app.ColdStartTimeout, err)
			continue
		}
		for _, want := range []string{`annotation ebb.dev/cold-start-timeout="` + tc.value + `"`, "at most 15m0s"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("cold-start-timeout %q: the refusal %q does not say %q", tc.value, err, want)
			}
		}
	}
}
