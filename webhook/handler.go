package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/ebb-dev/ebb/webhook/inject"
)

// podInjector answers pod admissions: it injects the sidecar and, unless the
// request is a dry run, registers the app's AppRoute.
type podInjector struct {
	cfg     inject.Config
	decoder admission.Decoder
	routes  *routes
	log     logr.Logger
}

var _ admission.Handler = (*podInjector)(nil)

func (h *podInjector) Handle(ctx context.Context, req admission.Request) admission.Response {
	start := time.Now()
	resp, result := h.handle(ctx, req)
	admissionDuration.WithLabelValues(result).Observe(time.Since(start).Seconds())
	return resp
}

func (h *podInjector) handle(ctx context.Context, req admission.Request) (admission.Response, string) {
	if req.Operation != admissionv1.Create {
		return admission.Allowed(""), resultUnchanged
	}
	pod := &corev1.Pod{}
	if err := h.decoder.Decode(req, pod); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decode pod: %w", err)), resultError
	}
	out, warnings, err := inject.Inject(pod, h.cfg)
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
	if pod.Namespace == "" { // the request's body may leave it out
		pod.Namespace = req.Namespace
	}
	if req.DryRun == nil || !*req.DryRun {
		if w := h.register(ctx, pod); w != "" {
			warnings = append(warnings, w)
		}
	}
	raw, err := json.Marshal(out)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, fmt.Errorf("encode injected pod: %w", err)), resultError
	}
	return admission.PatchResponseFromRaw(req.Object.Raw, raw).WithWarnings(warnings...), resultInjected
}

// register creates or updates the AppRoute of the pod's Deployment. It never
// refuses the pod: a failure is logged, shown as a warning, and repaired by
// the AppRoute controller at the Deployment's next change.
func (h *podInjector) register(ctx context.Context, pod *corev1.Pod) string {
	d, err := h.routes.deploymentOf(ctx, pod)
	if err != nil {
		h.log.Error(err, "find the pod's Deployment", "namespace", pod.Namespace, "pod", pod.GenerateName+pod.Name)
		return "ebb could not register the app's route: " + err.Error()
	}
	if d == nil {
		return "no Deployment manages this pod, so ebb registers no AppRoute for it (ebb scales Deployments)"
	}
	want, _, _, err := h.routes.desired(ctx, d)
	if err != nil {
		h.log.Error(err, "derive AppRoute", "namespace", d.Namespace, "deployment", d.Name)
		return fmt.Sprintf("ebb could not register the app's route from Deployment %s: %v", d.Name, err)
	}
	previous, err := h.routes.apply(ctx, want)
	if err != nil {
		h.log.Error(err, "register AppRoute", "namespace", d.Namespace, "deployment", d.Name)
		return "ebb could not register the app's route: " + err.Error()
	}
	if previous != "" {
		return fmt.Sprintf("AppRoute %s routed Deployment %s and now routes Deployment %s: give each Deployment its own %s label value", want.Name, previous, d.Name, h.routes.names.AppLabel())
	}
	return ""
}
