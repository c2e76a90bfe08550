package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
)

// policyValidator answers RoutePolicy admissions: it refuses a policy
// whose wakes close a cycle with the cluster's other RoutePolicies (read
// from the manager's cache), naming the cycle in order, and one whose
// wakes reach more apps than one walk of the graph reads (maxWalk): an
// app on a cycle would wait on itself to be released and keep itself up,
// and a cycle past the bound would go unseen. It makes no API
// call and writes nothing.
type policyValidator struct {
	policies *policies
}

var _ admission.Handler = (*policyValidator)(nil)

func (v *policyValidator) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return admission.Allowed("")
	}
	var pol routingv1alpha1.RoutePolicy
	if err := json.Unmarshal(req.Object.Raw, &pol); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decode RoutePolicy: %w", err))
	}
	if pol.Namespace == "" {
		pol.Namespace = req.Namespace
	}
	if req.Operation == admissionv1.Update {
		// An update that leaves the app and its wakes as they were (its
		// labels, a finalizer) is let through: it closes no new cycle.
		var old routingv1alpha1.RoutePolicy
		if err := json.Unmarshal(req.OldObject.Raw, &old); err == nil && old.Spec.App == pol.Spec.App &&
			slices.Equal(old.Spec.Wakes, pol.Spec.Wakes) {
			return admission.Allowed("")
		}
	}
	if dup := duplicateWake(&pol); dup != "" {
		return admission.Denied(fmt.Sprintf("spec.wakes: %s is named twice; name each app once", dup))
	}
	cycle, truncated, err := v.cycle(ctx, &pol)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	if cycle != nil {
		return admission.Denied(cycleMessage(cycle))
	}
	if truncated {
		return admission.Denied(fmt.Sprintf("spec.wakes: the apps these wakes reach, directly or through others, are more than %d (or their policies name more than %d wakes in all): too many to check for a cycle, and to show in status.dependencies; wake fewer apps, or split the apps into smaller groups",
			maxWalk, maxWalkReads))
	}
	return admission.Allowed("")
}

// cycle is the cycle pol would close: its app's edges are its own wakes
// and those of the app's other policies (pol's stored version left out).
// truncated says the graph its wakes reach is larger than one walk reads
// (maxWalk apps, maxWalkReads policies and wakes): no cycle was found in
// what was read, but the rest was not checked.
func (v *policyValidator) cycle(ctx context.Context, pol *routingv1alpha1.RoutePolicy) (cycle []appKey, truncated bool, err error) {
	if len(pol.Spec.Wakes) == 0 {
		return nil, false, nil
	}
	start := appKey{pol.Namespace, pol.Spec.App}
	var first []appKey
	for _, w := range pol.Spec.Wakes {
		first = append(first, wakeKey(pol.Namespace, w))
	}
	w := v.policies.walk(types.NamespacedName{Namespace: pol.Namespace, Name: pol.Name})
	others, err := w.edges(ctx, start)
	if err != nil {
		return nil, false, err
	}
	for _, k := range others {
		if !slices.Contains(first, k) {
			first = append(first, k)
		}
	}
	cycle, err = w.cycleThrough(ctx, start, first)
	return cycle, cycle == nil && w.truncated, err
}

// duplicateWake is an app pol's wakes name twice (the namespace left out
// or written out alike), "" if none.
func duplicateWake(pol *routingv1alpha1.RoutePolicy) string {
	seen := map[appKey]bool{}
	for _, w := range pol.Spec.Wakes {
		k := wakeKey(pol.Namespace, w)
		if seen[k] {
			return k.String()
		}
		seen[k] = true
	}
	return ""
}
