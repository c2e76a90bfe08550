package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/ebb-dev/ebb/webhook/inject"
)

// podInjector answers pod admissions: it injects the sidecar, with the
// static responses of the app's RoutePolicy read from the manager's cache.
// It makes no API call and writes nothing, dry run or not: the AppRoute
// controller routes the app from its Deployment, before any pod is
// admitted.
type podInjector struct {
	cfg     inject.Config
	decoder admission.Decoder
	// policies gives the app's RoutePolicy (nil: none).
	policies *policies
	// customGroups are the API groups of the --scale-targets kinds. A pod
	// controlled by an object of one of them is taken as routed: a listed
	// resource's kind is known only once its CRD is served, and admission
	// makes no API call.
	customGroups []string
}

var _ admission.Handler = (*podInjector)(nil)

func (h *podInjector) Handle(ctx context.Context, req admission.Request) admission.Response {
	start := time.Now()
	resp, result := h.handle(ctx, req)
	admissionDuration.WithLabelValues(result).Observe(time.Since(start).Seconds())
	return resp
}

// warnNotRouted is the warning for a pod whose controller is of no kind
// ebb routes (routedController; a ReplicaSet's pod is not checked further:
// that would cost a lookup).
const warnNotRouted = "no Deployment, StatefulSet or --scale-targets kind manages this pod, so ebb registers no AppRoute for it"

// groupsOf are the API groups of the listed resources.
func groupsOf(targets []schema.GroupResource) []string {
	var out []string
	for _, gr := range targets {
		out = append(out, gr.Group)
	}
	return out
}

// routedController says whether the pod's controller is of a kind whose
// pods ebb routes: a ReplicaSet (a Deployment's, or a Rollout's), a
// StatefulSet, or a kind of a --scale-targets group.
func (h *podInjector) routedController(pod *corev1.Pod) bool {
	ref := metav1.GetControllerOf(pod)
	if ref == nil {
		return false
	}
	if ref.APIVersion == "apps/v1" {
		return ref.Kind == "ReplicaSet" || ref.Kind == "StatefulSet"
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	return err == nil && slices.Contains(h.customGroups, gv.Group)
}

func (h *podInjector) handle(ctx context.Context, req admission.Request) (admission.Response, string) {
	if req.Operation != admissionv1.Create {
		return admission.Allowed(""), resultUnchanged
	}
	pod := &corev1.Pod{}
	if err := h.decoder.Decode(req, pod); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decode pod: %w", err)), resultError
	}
	if pod.Namespace == "" {
		pod.Namespace = req.Namespace // the hosts it may list depend on it
	}
	pol, polWarnings := h.policy(ctx, pod)
	out, warnings, err := inject.Inject(pod, h.cfg, pol)
	var refusal *inject.RefusalError
	switch {
	case errors.As(err, &refusal):
		return admission.Denied(refusal.Error()), resultRefused
	case err != nil:
		return admission.Errored(http.StatusInternalServerError, fmt.Errorf("inject pod: %w", err)), resultError
	}
	if inject.HasSidecar(&pod.Spec) {
		// Already injected (by us on a reinvocation, or by another instance).
		return admission.Allowed("").WithWarnings(warnings...), resultUnchanged
	}
	warnings = append(warnings, polWarnings...)
	if (req.DryRun == nil || !*req.DryRun) && !h.routedController(pod) {
		warnings = append(warnings, warnNotRouted)
	}
	orig, err := patchDoc(pod)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err), resultError
	}
	injected, err := patchDoc(out)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err), resultError
	}
	return admission.PatchResponseFromRaw(orig, injected).WithWarnings(warnings...), resultInjected
}

// policy is what the RoutePolicy of pod's app gives its sidecar, with a
// warning when the policy's static responses cannot be given.
func (h *podInjector) policy(ctx context.Context, pod *corev1.Pod) (inject.Policy, []string) {
	app, ok := pod.Labels[h.cfg.Names.AppLabel()]
	if h.policies == nil || !ok || inject.HasSidecar(&pod.Spec) {
		return inject.Policy{}, nil
	}
	all, err := h.policies.forApp(ctx, pod.Namespace, app)
	if err != nil {
		return inject.Policy{}, []string{fmt.Sprintf("ebb could not read the RoutePolicies of app %s (%v): this pod's sidecar answers no static response; restart the pod to give it them", app, err)}
	}
	if len(all) == 0 {
		return inject.Policy{}, nil
	}
	static, err := staticJSON(&all[0])
	if err != nil {
		return inject.Policy{}, []string{fmt.Sprintf("RoutePolicy %s: spec.staticResponses: %v; this pod's sidecar answers none of them", all[0].Name, err)}
	}
	return inject.Policy{StaticResponses: static}, nil
}

// patchDocument holds what Inject changes in a pod, at its path in the pod:
// the annotations, init containers and containers. controller-runtime
// computes the JSON patch between the documents of the pod as decoded and
// as injected, so the patch holds exactly Inject's changes (TestPatch
// checks that it turns the request's pod into the injected one) and costs
// about half as much as a diff of the request's raw pod with the whole
// re-encoded pod. It leaves the rest of the pod as the API server sent it:
// a field this build does not know survives, where that diff would remove it.
type patchDocument struct {
	Metadata struct {
		Annotations map[string]string `json:"annotations,omitempty"`
	} `json:"metadata"`
	Spec struct {
		InitContainers []corev1.Container `json:"initContainers,omitempty"`
		Containers     []corev1.Container `json:"containers"`
	} `json:"spec"`
}

func patchDoc(pod *corev1.Pod) ([]byte, error) {
	var d patchDocument
	d.Metadata.Annotations = pod.Annotations
	d.Spec.InitContainers, d.Spec.Containers = pod.Spec.InitContainers, pod.Spec.Containers
	b, err := json.Marshal(&d)
	if err != nil {
		return nil, fmt.Errorf("encode pod for the patch: %w", err)
	}
	return b, nil
}
