package webhook

import (
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/ebb-dev/ebb/internal/groupsuffix"
)

// TestOtherInstances: only another ebb instance's webhook configuration
// created or deleted reconciles every app; cert-manager's, Istio's or a
// Helm hook's, this instance's own, or any update do not.
func TestOtherInstances(t *testing.T) {
	names := groupsuffix.MustNew("ebb.dev")
	p := otherInstances(names)
	mwc := func(name string) *admissionregistrationv1.MutatingWebhookConfiguration {
		return &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}}
	}
	for name, want := range map[string]bool{
		ConfigurationName(groupsuffix.MustNew("team-b.example.com")): true,
		ConfigurationName(names):                                     false,
		"cert-manager-webhook":                                       false,
		"istio-sidecar-injector":                                     false,
		"sidecar-injector":                                           false,
		"helm-hook-mutating-config":                                  false,
	} {
		if got := p.Create(event.CreateEvent{Object: mwc(name)}); got != want {
			t.Errorf("%s created: reconciles every app %v, want %v", name, got, want)
		}
		if got := p.Delete(event.DeleteEvent{Object: mwc(name)}); got != want {
			t.Errorf("%s deleted: reconciles every app %v, want %v", name, got, want)
		}
		if p.Update(event.UpdateEvent{ObjectOld: mwc(name), ObjectNew: mwc(name)}) {
			t.Errorf("%s updated: reconciles every app", name)
		}
	}
}
