package inject

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/internal/suggest"
)

// knownKeys are the keys ebb reads under "<suffix>/" on a pod or pod
// template, without the prefix, by kind.
var knownKeys = map[string][]string{
	"label": {"app"},
	"annotation": {"hosts", AnnotationPaths, AnnotationPort, AnnotationService, AnnotationQueueSize,
		AnnotationColdStartTimeout, AnnotationDrainTimeout, AnnotationResponseHeaderTimeout, AnnotationRequestTimeout, AnnotationStreamIdleTimeout, AnnotationConcurrency, AnnotationConcurrencyQueue,
		AnnotationFallback, AnnotationPlaceholder, AnnotationRouteLabels, "sidecar"},
}

// UnknownKeys names every label and annotation of meta under the instance's
// "<suffix>/" that ebb does not read, as warnings a user can act on: the
// known key it is closest to, or the keys ebb reads. Such a key is silently
// ignored otherwise, which hides a typo like "ebb.dev/hsots".
func UnknownKeys(meta *metav1.ObjectMeta, n groupsuffix.Names) []string {
	prefix := n.Suffix() + "/"
	var warnings []string
	for _, kind := range []string{"label", "annotation"} {
		m := meta.Labels
		if kind == "annotation" {
			m = meta.Annotations
		}
		var keys []string
		for k := range m {
			if name, ok := strings.CutPrefix(k, prefix); ok && !slices.Contains(knownKeys[kind], name) {
				keys = append(keys, name)
			}
		}
		sort.Strings(keys)
		for _, name := range keys {
			w := fmt.Sprintf("%s %q is not a key ebb reads", kind, prefix+name)
			if near := suggest.Nearest(name, knownKeys[kind]); near != "" {
				w += fmt.Sprintf(": did you mean %q?", prefix+near)
			} else if kind == "label" && slices.Contains(knownKeys["annotation"], name) {
				w += ": set it as an annotation, not a label"
			} else if kind == "annotation" && slices.Contains(knownKeys["label"], name) {
				w += ": set it as a label, not an annotation"
			} else {
				w += fmt.Sprintf(" (%ss it reads: %s)", kind, prefix+strings.Join(knownKeys[kind], ", "+prefix))
			}
			warnings = append(warnings, w)
		}
	}
	return warnings
}
