package fleet

import (
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ebb-dev/ebb/activator/proxy"
	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
)

// EbbPhases are picked from proxy.PhaseNames by position: a phase renamed,
// added or moved there fails here, so that ebb's part is chosen again
// rather than summed from the wrong phases (or from none).
func TestEbbPhasesAreTheActivatorsOwn(t *testing.T) {
	if diff := cmp.Diff([]string{"ScalerTold", "SidecarReady", "FirstByte"}, EbbPhases); diff != "" {
		t.Errorf("EbbPhases (-want +got):\n%s", diff)
	}
}

func coldStart(names ...string) *routingv1alpha1.ColdStart {
	cs := &routingv1alpha1.ColdStart{}
	for i, n := range names {
		cs.Phases = append(cs.Phases, routingv1alpha1.ColdStartPhase{Name: n, Duration: metav1.Duration{Duration: time.Duration(i+1) * time.Millisecond}})
	}
	return cs
}

func TestEbbPartSumsEbbsPhases(t *testing.T) {
	// ScalerTold 1, SidecarReady 6, FirstByte 8 (ms); Dependencies (7)
	// is not ebb's.
	if got, want := EbbPart(coldStart(proxy.PhaseNames[:]...)), 15*time.Millisecond; got != want {
		t.Errorf("EbbPart = %s, want %s", got, want)
	}
}

func TestWakeWithoutEbbsPhasesFails(t *testing.T) {
	all := proxy.PhaseNames[:]
	for _, tc := range []struct {
		name        string
		cs          *routingv1alpha1.ColdStart
		wantMissing []string
	}{
		{"every phase", coldStart(all...), nil},
		{"no SidecarReady", coldStart("ScalerTold", "Scaled", "PodCreated", "PodScheduled", "ContainersStarted", "FirstByte"), []string{"SidecarReady"}},
		{"renamed phases", coldStart("Told", "Scaled", "Ready", "Byte"), []string{"ScalerTold", "SidecarReady", "FirstByte"}},
		{"no phase", coldStart(), []string{"ScalerTold", "SidecarReady", "FirstByte"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.wantMissing, MissingEbbPhases(tc.cs)); diff != "" {
				t.Errorf("MissingEbbPhases (-want +got):\n%s", diff)
			}
			w := Wake{Status: http.StatusOK, ColdStart: tc.cs}
			if got, want := w.OK(), tc.wantMissing == nil; got != want {
				t.Errorf("OK() = %t, want %t (%s)", got, want, w)
			}
			_, _, failed := Summarize([]Wake{w})
			if want := map[bool]int{true: 0, false: 1}[tc.wantMissing == nil]; failed != want {
				t.Errorf("Summarize: %d failed, want %d", failed, want)
			}
		})
	}
}
