package federation

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestObservedAtMax: a member is at its max only while its HPA places all
// it wants, wants its max and (when it says) would want more; one read
// that is not resets the stretch, so only an unbroken one counts.
func TestObservedAtMax(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var o observed
	at := func(s int, p picture) time.Duration {
		now := t0.Add(time.Duration(s) * time.Second)
		o.observe(now, p, window)
		return o.atMaxFor(now)
	}
	limited := picture{soMax: 3, current: 3, desired: 3, hasLimitCondition: true, limited: true}
	if d := at(0, limited); d <= 0 {
		t.Fatalf("at max: atMaxFor %s", d)
	}
	if d := at(4, limited); d != 4*time.Second {
		t.Errorf("4 s at max: atMaxFor %s", d)
	}
	within := limited
	within.limited = false // the HPA wants exactly its max: no more
	if d := at(5, within); d != 0 {
		t.Errorf("within its max: atMaxFor %s, want 0", d)
	}
	if d := at(6, limited); d > time.Millisecond {
		t.Errorf("at max again: atMaxFor %s, want a new stretch", d)
	}
	placing := limited
	placing.current = 2 // a pod not started yet
	if d := at(7, placing); d != 0 {
		t.Errorf("current < desired: atMaxFor %s, want 0", d)
	}
	noCondition := picture{soMax: 3, current: 3, desired: 3}
	if d := at(8, noCondition); d <= 0 {
		t.Errorf("an HPA without ScalingLimited at its max: the seed's rule says at max, got %s", d)
	}
	if d := at(9, picture{}); d != 0 {
		t.Errorf("at zero: atMaxFor %s", d)
	}
}

// TestObservedUsed: what a member used is the most it wanted within the
// window; what it wanted and could not place for the whole window is not
// counted.
func TestObservedUsed(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var o observed
	read := func(s int, current, desired int32) int32 {
		o.observe(t0.Add(time.Duration(s)*time.Second), picture{soMax: 6, current: current, desired: desired}, window)
		return o.used()
	}
	if u := read(0, 4, 4); u != 4 {
		t.Errorf("used %d, want 4", u)
	}
	if u := read(5, 1, 1); u != 4 {
		t.Errorf("within the window of a 4: used %d", u)
	}
	if u := read(16, 1, 1); u != 1 {
		t.Errorf("the 4 left the window: used %d, want 1", u)
	}
	// Wants 5, places 2: counted as wanted while it may still be starting
	// pods, as placed once it has been short for the whole window.
	if u := read(17, 2, 5); u != 5 {
		t.Errorf("short for 0 s: used %d, want 5", u)
	}
	if u := read(17+15, 2, 5); u != 5 {
		t.Errorf("short for the window, the 5 still in it: used %d, want 5", u)
	}
	if u := read(17+31, 2, 5); u != 2 {
		t.Errorf("short for twice the window: used %d, want 2 (what it could place)", u)
	}
}

func TestAppOf(t *testing.T) {
	so := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{
		"scaleTargetRef": map[string]any{"name": "web"},
		"triggers":       []any{map[string]any{"type": "cpu"}, map[string]any{"type": "external-push", "metadata": map[string]any{"app": "hello"}}},
	}}}
	if got := appOf(so); got != "hello" {
		t.Errorf("appOf: %q, want the trigger's app", got)
	}
	unstructured.RemoveNestedField(so.Object, "spec", "triggers")
	if got := appOf(so); got != "web" {
		t.Errorf("appOf without an ebb trigger: %q, want the scale target", got)
	}
}

func TestParseScalerService(t *testing.T) {
	s, err := parseScalerService("ebb-system/ebb-scaler:8080")
	if err != nil || *s != (scalerService{"ebb-system", "ebb-scaler", "8080"}) {
		t.Errorf("parse: %+v, %v", s, err)
	}
	for _, bad := range []string{"", "ebb-scaler:8080", "ebb-system/ebb-scaler", "/x:1", "ns/:1", "ns/x:"} {
		if _, err := parseScalerService(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
