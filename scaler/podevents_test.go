package scaler

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// An event about a pod whose name takes all 253 characters is still a
// valid object name, or the API server refuses it and the pod goes unnamed.
func TestEventNameFitsAnyPodName(t *testing.T) {
	now := time.Unix(1_800_000_000, 123)
	for _, pod := range []string{"web-1", strings.Repeat("a", 253), strings.Repeat("a", 240) + "-" + strings.Repeat("b", 12), strings.Repeat("a.", 126) + "a"} {
		name := eventName(pod, now, 300)
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			t.Errorf("eventName(%d characters) = %q: %v", len(pod), name, errs)
		}
		if len(pod) < 200 && !strings.HasPrefix(name, pod+".") {
			t.Errorf("eventName(%q) = %q, want the pod's name first", pod, name)
		}
	}
}
