package v1alpha1

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Version is the API version of the types in this package.
const Version = "v1alpha1"

// DefaultGroup is the group of an instance with the default suffix; the
// generated CRD in config/crd uses it.
const DefaultGroup = "routing.ebb.dev"

// Kind, ListKind and Resource name the AppRoute type in any group.
const (
	Kind     = "AppRoute"
	ListKind = "AppRouteList"
	Resource = "approutes"
)

// GroupVersion is group/v1alpha1 for an instance's group (routing.<suffix>,
// see groupsuffix.Names.Group).
func GroupVersion(group string) schema.GroupVersion {
	return schema.GroupVersion{Group: group, Version: Version}
}

// FederatedScaleResourceIn is the federatedscales resource in group.
func FederatedScaleResourceIn(group string) schema.GroupVersionResource {
	return GroupVersion(group).WithResource(FederatedScaleResource)
}

// GroupVersionResource is the approutes resource in group.
func GroupVersionResource(group string) schema.GroupVersionResource {
	return GroupVersion(group).WithResource(Resource)
}

// AddToScheme registers the Go types of this package under group. One scheme
// must hold them under one group only: a client looks a Go type's kind up in
// its scheme, and two groups would make that ambiguous. Each instance (each
// manager) therefore builds its own scheme.
func AddToScheme(scheme *runtime.Scheme, group string) error {
	if group == "" {
		return fmt.Errorf("register %s: empty API group", Kind)
	}
	gv := GroupVersion(group)
	if kinds, _, err := scheme.ObjectKinds(&AppRoute{}); err == nil {
		for _, k := range kinds {
			if k.Group != group {
				return fmt.Errorf("register %s in group %q: scheme already holds it in group %q", Kind, group, k.Group)
			}
		}
	}
	scheme.AddKnownTypes(gv, &AppRoute{}, &AppRouteList{}, &FederatedScale{}, &FederatedScaleList{}, &DomainClaim{}, &DomainClaimList{}, &RoutePolicy{}, &RoutePolicyList{})
	metav1.AddToGroupVersion(scheme, gv)
	return nil
}

// DomainClaimResourceIn is the domainclaims resource in group.
func DomainClaimResourceIn(group string) schema.GroupVersionResource {
	return GroupVersion(group).WithResource(DomainClaimResource)
}
