package webhook

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ebb-dev/ebb/internal/groupsuffix"
)

// The marker below generates config/webhook/manifests.yaml for the default
// suffix; Configuration builds the same webhook for any suffix and adds the
// selectors controller-gen cannot express. A test keeps the two in step.
//
// +kubebuilder:webhook:path=/inject-v1-pod,mutating=true,failurePolicy=fail,sideEffects=NoneOnDryRun,groups="",resources=pods,verbs=create,versions=v1,name=inject.ebb.dev,admissionReviewVersions=v1,reinvocationPolicy=IfNeeded,timeoutSeconds=5,matchPolicy=Equivalent

// +kubebuilder:webhook:path=/validate-routepolicy,mutating=false,failurePolicy=fail,sideEffects=None,groups=routing.ebb.dev,resources=routepolicies,verbs=create;update,versions=v1alpha1,name=validate-routepolicy.ebb.dev,admissionReviewVersions=v1,timeoutSeconds=5,matchPolicy=Equivalent

// InjectPath is the URL path of the pod-injecting webhook.
const InjectPath = "/inject-v1-pod"

// MaxTimeoutSeconds bounds the webhook's timeoutSeconds: a slow webhook
// delays every pod of every opted-in namespace.
const MaxTimeoutSeconds = 5

// ConfigurationOptions are the settings of a MutatingWebhookConfiguration
// that the installer chooses.
type ConfigurationOptions struct {
	// FailurePolicy: Fail (default) refuses pods while the webhook is down;
	// Ignore admits them without sidecar.
	FailurePolicy admissionregistrationv1.FailurePolicyType
	// TimeoutSeconds, 1 to MaxTimeoutSeconds (default MaxTimeoutSeconds).
	TimeoutSeconds int32
	// ClientConfig reaches the webhook (Service or URL); the path is set to
	// InjectPath when a Service is given without one.
	ClientConfig admissionregistrationv1.WebhookClientConfig
}

// timeout is TimeoutSeconds bounded to 1..MaxTimeoutSeconds.
func (o ConfigurationOptions) timeout() int32 {
	if o.TimeoutSeconds <= 0 || o.TimeoutSeconds > MaxTimeoutSeconds {
		return MaxTimeoutSeconds
	}
	return o.TimeoutSeconds
}

// clientConfig is a copy of ClientConfig, its Service given path when it
// names none.
func (o ConfigurationOptions) clientConfig(path string) admissionregistrationv1.WebhookClientConfig {
	cc := *o.ClientConfig.DeepCopy()
	if cc.Service != nil && cc.Service.Path == nil {
		cc.Service.Path = &path
	}
	return cc
}

// ConfigurationName is the name of the MutatingWebhookConfiguration of an
// instance: sidecar-injector.<suffix>.
func ConfigurationName(names groupsuffix.Names) string {
	return names.ClusterScopedName("sidecar-injector")
}

// WebhookName is the name of the webhook in it: inject.<suffix>.
func WebhookName(names groupsuffix.Names) string { return "inject." + names.Suffix() }

// Configuration is the MutatingWebhookConfiguration of one instance: pods on
// CREATE, only in namespaces labelled <suffix>/inject=enabled and only pods
// labelled <suffix>/app, so no other pod ever reaches the webhook.
func Configuration(names groupsuffix.Names, o ConfigurationOptions) *admissionregistrationv1.MutatingWebhookConfiguration {
	fail := o.FailurePolicy
	if fail == "" {
		fail = admissionregistrationv1.Fail
	}
	timeout := o.timeout()
	cc := o.clientConfig(InjectPath)
	sideEffects := admissionregistrationv1.SideEffectClassNoneOnDryRun
	reinvoke := admissionregistrationv1.IfNeededReinvocationPolicy
	match := admissionregistrationv1.Equivalent
	scope := admissionregistrationv1.NamespacedScope
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: ConfigurationName(names)},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:         WebhookName(names),
			ClientConfig: cc,
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{
					APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}, Scope: &scope,
				},
			}},
			FailurePolicy:           &fail,
			MatchPolicy:             &match,
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{names.InjectLabel(): groupsuffix.InjectEnabled}},
			ObjectSelector:          &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: names.AppLabel(), Operator: metav1.LabelSelectorOpExists}}},
			SideEffects:             &sideEffects,
			TimeoutSeconds:          &timeout,
			AdmissionReviewVersions: []string{"v1"},
			ReinvocationPolicy:      &reinvoke,
		}},
	}
}

// ValidatePolicyPath is the URL path of the RoutePolicy-validating webhook.
const ValidatePolicyPath = "/validate-routepolicy"

// ValidatingConfigurationName is the name of the
// ValidatingWebhookConfiguration of an instance:
// routepolicy-validator.<suffix>.
func ValidatingConfigurationName(names groupsuffix.Names) string {
	return names.ClusterScopedName("routepolicy-validator")
}

// ValidatingWebhookName is the name of the webhook in it:
// validate-routepolicy.<suffix>.
func ValidatingWebhookName(names groupsuffix.Names) string {
	return "validate-routepolicy." + names.Suffix()
}

// ValidatingConfiguration is the ValidatingWebhookConfiguration of one
// instance: its own group's RoutePolicies on CREATE and UPDATE, refused
// when their wakes close a cycle. Its failurePolicy is always Fail, whatever
// o says: while the webhook is down a policy is refused (and can be applied
// again a moment later), where Ignore would let a cycle in, which the
// webhook then only reports and leaves out of the AppRoutes. o gives the
// timeout and the client config (the path set to ValidatePolicyPath when a
// Service is given without one).
//
// Its matchConditions send it only a policy with wakes that is created or
// whose wakes or app change, the only ones that can close a cycle: while
// the webhook is down or mid-upgrade, a policy's label edit, a finalizer's
// removal (a namespace being deleted) and a policy without wakes are
// admitted all the same.
func ValidatingConfiguration(names groupsuffix.Names, o ConfigurationOptions) *admissionregistrationv1.ValidatingWebhookConfiguration {
	fail := admissionregistrationv1.Fail
	timeout := o.timeout()
	cc := o.clientConfig(ValidatePolicyPath)
	sideEffects := admissionregistrationv1.SideEffectClassNone
	match := admissionregistrationv1.Equivalent
	scope := admissionregistrationv1.NamespacedScope
	return &admissionregistrationv1.ValidatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: ValidatingConfigurationName(names)},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:         ValidatingWebhookName(names),
			ClientConfig: cc,
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{
					APIGroups: []string{names.Group()}, APIVersions: []string{"v1alpha1"}, Resources: []string{"routepolicies"}, Scope: &scope,
				},
			}},
			MatchConditions:         policyMatchConditions(),
			FailurePolicy:           &fail,
			MatchPolicy:             &match,
			SideEffects:             &sideEffects,
			TimeoutSeconds:          &timeout,
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
}

// policyMatchConditions are the validating webhook's matchConditions (the
// chart's are the same; controller-gen's marker cannot express them): a
// policy with wakes, created or with its wakes or app changed. Each is
// safe alone (every condition is evaluated, and one false skips the
// webhook whatever the others say).
func policyMatchConditions() []admissionregistrationv1.MatchCondition {
	return []admissionregistrationv1.MatchCondition{
		{Name: "has-wakes", Expression: "has(object.spec.wakes) && size(object.spec.wakes) > 0"},
		{Name: "wakes-or-app-changed", Expression: "request.operation == 'CREATE' || !has(object.spec.wakes) || !has(oldObject.spec.wakes) || object.spec.wakes != oldObject.spec.wakes || object.spec.app != oldObject.spec.app"},
	}
}
