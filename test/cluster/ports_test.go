package cluster

import "testing"

// TestFreePortsOutsideTheEphemeralRange: a port of the ephemeral range,
// free when picked, can be taken by an outgoing connection before the
// program that was to listen on it starts.
func TestFreePortsOutsideTheEphemeralRange(t *testing.T) {
	low := lowestEphemeralPort()
	ports, err := freePorts(50)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p < 10000 || p >= low {
			t.Errorf("port %d outside [10000, %d)", p, low)
		}
		if seen[p] {
			t.Errorf("port %d picked twice", p)
		}
		seen[p] = true
	}
}
