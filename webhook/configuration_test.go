package webhook

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ebb-dev/ebb/internal/groupsuffix"
)

func TestConfigurationForAnotherSuffix(t *testing.T) {
	names := groupsuffix.MustNew("team1.example.com")
	cfg := Configuration(names, ConfigurationOptions{
		FailurePolicy:  admissionregistrationv1.Ignore,
		TimeoutSeconds: 30,
		ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{
			Namespace: "ebb-team1", Name: "ebb-webhook"}},
	})
	w := cfg.Webhooks[0]
	got := []any{cfg.Name, w.Name, *w.FailurePolicy, *w.TimeoutSeconds, *w.ReinvocationPolicy, *w.SideEffects, *w.ClientConfig.Service.Path, w.NamespaceSelector, w.ObjectSelector}
	want := []any{"sidecar-injector.team1.example.com", "inject.team1.example.com", admissionregistrationv1.Ignore, int32(5),
		admissionregistrationv1.IfNeededReinvocationPolicy, admissionregistrationv1.SideEffectClassNoneOnDryRun, "/inject-v1-pod",
		&metav1.LabelSelector{MatchLabels: map[string]string{"team1.example.com/inject": "enabled"}},
		&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team1.example.com/app", Operator: metav1.LabelSelectorOpExists}}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("configuration (-want +got):\n%s", diff)
	}
	if def := Configuration(names, ConfigurationOptions{}); *def.Webhooks[0].FailurePolicy != admissionregistrationv1.Fail {
		t.Errorf("default failurePolicy %s, want Fail", *def.Webhooks[0].FailurePolicy)
	}
}

// TestValidatingConfigurationForAnotherSuffix: the RoutePolicy validator
// of an instance selects only its own group's policies, and always fails
// closed.
func TestValidatingConfigurationForAnotherSuffix(t *testing.T) {
	names := groupsuffix.MustNew("team1.example.com")
	cfg := ValidatingConfiguration(names, ConfigurationOptions{
		FailurePolicy: admissionregistrationv1.Ignore, // not taken: a cycle must not slip in
		ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{
			Namespace: "ebb-team1", Name: "ebb-webhook"}},
	})
	w := cfg.Webhooks[0]
	got := []any{cfg.Name, w.Name, *w.FailurePolicy, *w.SideEffects, *w.ClientConfig.Service.Path, w.Rules[0].APIGroups, w.Rules[0].Resources, w.Rules[0].Operations}
	want := []any{"routepolicy-validator.team1.example.com", "validate-routepolicy.team1.example.com", admissionregistrationv1.Fail,
		admissionregistrationv1.SideEffectClassNone, "/validate-routepolicy", []string{"routing.team1.example.com"}, []string{"routepolicies"},
		[]admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("configuration (-want +got):\n%s", diff)
	}
}
