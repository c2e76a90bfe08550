package groupsuffix

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestNamesDefault(t *testing.T) {
	n := MustNew(Default)
	got := []string{n.Group(), n.InjectLabel(), n.AppLabel(), n.HostsAnnotation(), n.EndpointSliceManagedBy(), n.Key("port"), n.SidecarAnnotation(), n.ClusterScopedName("sidecar-injector")}
	want := []string{"routing.ebb.dev", "ebb.dev/inject", "ebb.dev/app", "ebb.dev/hosts", "activator.ebb.dev", "ebb.dev/port", "ebb.dev/sidecar", "sidecar-injector.ebb.dev"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("names (-want +got):\n%s", diff)
	}
}

func TestTwoSuffixesShareNoName(t *testing.T) {
	a, b := MustNew("ebb.dev"), MustNew("team1.example.com")
	for _, pair := range [][2]string{
		{a.Group(), b.Group()}, {a.InjectLabel(), b.InjectLabel()}, {a.AppLabel(), b.AppLabel()},
		{a.HostsAnnotation(), b.HostsAnnotation()}, {a.EndpointSliceManagedBy(), b.EndpointSliceManagedBy()},
		{a.ClusterScopedName("x"), b.ClusterScopedName("x")},
	} {
		if pair[0] == pair[1] {
			t.Errorf("both instances use %q", pair[0])
		}
	}
}

func TestNewRejectsBadSuffix(t *testing.T) {
	for _, s := range []string{"", "ebb", "Ebb.dev", "-ebb.dev", "ebb..dev", "ebb_dev.io", strings.Repeat("a", 250) + ".io"} {
		if _, err := New(s); err == nil {
			t.Errorf("New(%q) accepted a bad suffix", s)
		}
	}
}
