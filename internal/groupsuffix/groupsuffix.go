package groupsuffix

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Default is the suffix of an instance installed without --api-group-suffix.
const Default = "ebb.dev"

// MetricLabel is the label every series of the scaler and the activator
// carries with the instance's suffix, so dashboards tell instances apart
// whatever the scrape configuration.
const MetricLabel = "ebb_instance"

// Names holds every name derived from one group suffix. The zero value is not
// valid; build one with New.
type Names struct {
	suffix string

	group           string
	injectLabel     string
	appLabel        string
	hostsAnnotation string
	managedBy       string
	sidecarMarker   string
}

// New validates suffix (a DNS-1123 subdomain of at least two labels) and
// derives the names from it once, so lookups on hot paths cost nothing.
func New(suffix string) (Names, error) {
	if errs := validation.IsDNS1123Subdomain(suffix); len(errs) > 0 {
		return Names{}, fmt.Errorf("api group suffix %q: %s", suffix, strings.Join(errs, "; "))
	}
	if !strings.Contains(suffix, ".") {
		return Names{}, fmt.Errorf("api group suffix %q: must contain a dot, like %q", suffix, Default)
	}
	// "routing." plus the suffix must itself be a valid group and label prefix.
	if len(suffix)+len("activator.") > validation.DNS1123SubdomainMaxLength {
		return Names{}, fmt.Errorf("api group suffix %q: longer than %d characters", suffix, validation.DNS1123SubdomainMaxLength-len("activator."))
	}
	return Names{
		suffix:          suffix,
		group:           "routing." + suffix,
		injectLabel:     suffix + "/inject",
		appLabel:        suffix + "/app",
		hostsAnnotation: suffix + "/hosts",
		managedBy:       "activator." + suffix,
		sidecarMarker:   suffix + "/sidecar",
	}, nil
}

// MustNew is New for constants known to be valid; it panics otherwise.
func MustNew(suffix string) Names {
	n, err := New(suffix)
	if err != nil {
		panic(err)
	}
	return n
}

// Suffix is the suffix the names were derived from.
func (n Names) Suffix() string { return n.suffix }

// Group is the API group of ebb's CRDs: routing.<suffix>.
func (n Names) Group() string { return n.group }

// InjectLabel is the namespace label that opts a namespace in: <suffix>/inject.
func (n Names) InjectLabel() string { return n.injectLabel }

// InjectEnabled is the value of InjectLabel that opts a namespace in.
const InjectEnabled = "enabled"

// AppLabel is the pod label that opts a pod in and names its app: <suffix>/app.
func (n Names) AppLabel() string { return n.appLabel }

// HostsAnnotation lists the hosts routed to an app: <suffix>/hosts.
func (n Names) HostsAnnotation() string { return n.hostsAnnotation }

// Key returns <suffix>/<name> for any other label or annotation key.
func (n Names) Key(name string) string { return n.suffix + "/" + name }

// EndpointSliceManagedBy is the endpointslice.kubernetes.io/managed-by value
// of the activator hand-off slices: activator.<suffix>.
func (n Names) EndpointSliceManagedBy() string { return n.managedBy }

// SidecarAnnotation marks a pod this instance injected: <suffix>/sidecar.
func (n Names) SidecarAnnotation() string { return n.sidecarMarker }

// ClusterScopedName names a cluster-scoped object of this instance, e.g.
// ClusterScopedName("sidecar-injector") = "sidecar-injector.<suffix>".
func (n Names) ClusterScopedName(base string) string { return base + "." + n.suffix }
