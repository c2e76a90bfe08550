package workload

import (
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Key names a workload in one string, where a string is all there is room
// for (a reconcile request's name, the activator's routing table): a
// Deployment by its name alone, as before other kinds were routed, any
// other kind as Kind.group/name, which no object name can be (a name holds
// no slash).
func Key(gk schema.GroupKind, name string) string {
	if gk == Deployment.GroupKind() {
		return name
	}
	return gk.Kind + "." + gk.Group + "/" + name
}

// KeyOf is the Key of the workload a scaleTargetRef names (apiVersion,
// kind, name); a missing kind is a Deployment's, as the CRD defaults it.
func KeyOf(apiVersion, kind, name string) string {
	return Key(GroupKindOf(apiVersion, kind), name)
}

// GroupKindOf is the group and kind of apiVersion and kind; a missing kind
// is a Deployment's.
func GroupKindOf(apiVersion, kind string) schema.GroupKind {
	if kind == "" {
		return Deployment.GroupKind()
	}
	gv, _ := schema.ParseGroupVersion(apiVersion)
	return schema.GroupKind{Group: gv.Group, Kind: kind}
}

// ParseKey undoes Key.
func ParseKey(key string) (schema.GroupKind, string) {
	kg, name, ok := strings.Cut(key, "/")
	if !ok {
		return Deployment.GroupKind(), key
	}
	k, g, _ := strings.Cut(kg, ".")
	return schema.GroupKind{Group: g, Kind: k}, name
}
