package workload

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Deployments and StatefulSets, routed whatever --scale-targets says.
var (
	Deployment  = schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
	StatefulSet = schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "StatefulSet"}
)

// Builtin are the kinds always routed, by their resources.
var Builtin = []schema.GroupVersionResource{
	{Group: "apps", Version: "v1", Resource: "deployments"},
	{Group: "apps", Version: "v1", Resource: "statefulsets"},
}

// ParseTargets parses the --scale-targets list: comma-separated
// <resource>.<group>, such as rollouts.argoproj.io. Every problem is
// returned at once, each naming the entry and the fix. Empty entries (a
// trailing comma) are skipped.
func ParseTargets(list string) ([]schema.GroupResource, error) {
	var out []schema.GroupResource
	var errs []error
	for _, raw := range strings.Split(list, ",") {
		s := strings.TrimSpace(raw)
		if s == "" {
			continue
		}
		gr := schema.ParseGroupResource(s)
		switch {
		case gr.Group == "":
			errs = append(errs, fmt.Errorf("%q names no API group: write <resource>.<group>, such as rollouts.argoproj.io", s))
			continue
		case gr.Resource != strings.ToLower(gr.Resource) || len(validation.IsDNS1123Label(gr.Resource)) > 0:
			errs = append(errs, fmt.Errorf("%q: the resource must be the plural lower-case name kubectl api-resources lists, such as rollouts", s))
			continue
		case len(validation.IsDNS1123Subdomain(gr.Group)) > 0:
			errs = append(errs, fmt.Errorf("%q: %q is no API group name", s, gr.Group))
			continue
		case gr.Group == "apps" || gr.Group == "core" || !strings.Contains(gr.Group, "."):
			// Kubernetes' own groups (apps, batch, and the core group) have
			// no dot; Deployments and StatefulSets are routed anyway, and
			// no other built-in kind is PodSpecable with a scale subresource.
			errs = append(errs, fmt.Errorf("%q is a Kubernetes built-in kind: Deployments and StatefulSets are always routed, and no other built-in kind can be; remove it", s))
			continue
		case slices.Contains(out, gr):
			errs = append(errs, fmt.Errorf("%q is listed twice: list each kind once", s))
			continue
		}
		out = append(out, gr)
	}
	return out, errors.Join(errs...)
}

// Kind is a listed kind resolved through the API server's discovery.
type Kind struct {
	GVK schema.GroupVersionKind
	GVR schema.GroupVersionResource
}

// Resolve maps a listed resource to its kind and preferred version. An
// error matched by meta.IsNoMatchError means the API server does not serve
// it (its CRD is not installed, or not yet).
func Resolve(m meta.RESTMapper, gr schema.GroupResource) (Kind, error) {
	gvr, err := m.ResourceFor(gr.WithVersion(""))
	if err != nil {
		return Kind{}, fmt.Errorf("resolve scale target %s: %w", gr, err)
	}
	gvk, err := m.KindFor(gvr)
	if err != nil {
		return Kind{}, fmt.Errorf("resolve scale target %s: %w", gr, err)
	}
	return Kind{GVK: gvk, GVR: gvr}, nil
}
