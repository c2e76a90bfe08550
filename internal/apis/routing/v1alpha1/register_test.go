package v1alpha1

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestAddToSchemeUnderAnyGroup(t *testing.T) {
	for _, group := range []string{DefaultGroup, "routing.team1.example.com"} {
		s := runtime.NewScheme()
		if err := AddToScheme(s, group); err != nil {
			t.Fatal(err)
		}
		if err := AddToScheme(s, group); err != nil {
			t.Errorf("registering twice in %s: %v", group, err)
		}
		kinds, _, err := s.ObjectKinds(&AppRoute{})
		if err != nil {
			t.Fatal(err)
		}
		want := []schema.GroupVersionKind{{Group: group, Version: "v1alpha1", Kind: "AppRoute"}}
		if diff := cmp.Diff(want, kinds); diff != "" {
			t.Errorf("kinds (-want +got):\n%s", diff)
		}
		if !s.Recognizes(GroupVersion(group).WithKind(ListKind)) {
			t.Errorf("%s: list kind not registered", group)
		}
	}
}

func TestAddToSchemeRefusesASecondGroup(t *testing.T) {
	s := runtime.NewScheme()
	if err := AddToScheme(s, DefaultGroup); err != nil {
		t.Fatal(err)
	}
	if err := AddToScheme(s, "routing.team1.example.com"); err == nil {
		t.Fatal("one scheme accepted AppRoute in two groups")
	}
	if err := AddToScheme(runtime.NewScheme(), ""); err == nil {
		t.Fatal("empty group accepted")
	}
}
