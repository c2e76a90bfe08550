package workload

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestKeyRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		gk   schema.GroupKind
		name string
		key  string
	}{
		{Deployment.GroupKind(), "web", "web"},
		{StatefulSet.GroupKind(), "db", "StatefulSet.apps/db"},
		{schema.GroupKind{Group: "example.com", Kind: "Worker"}, "w", "Worker.example.com/w"},
	} {
		if got := Key(tc.gk, tc.name); got != tc.key {
			t.Errorf("Key(%v, %s) = %q, want %q", tc.gk, tc.name, got, tc.key)
		}
		gk, name := ParseKey(tc.key)
		if gk != tc.gk || name != tc.name {
			t.Errorf("ParseKey(%q) = %v %s", tc.key, gk, name)
		}
	}
	if KeyOf("", "", "web") != "web" || KeyOf("apps/v1", "StatefulSet", "db") != "StatefulSet.apps/db" {
		t.Error("KeyOf")
	}
}
