package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DomainClaim names of the type in any group.
const (
	DomainClaimKind     = "DomainClaim"
	DomainClaimListKind = "DomainClaimList"
	DomainClaimResource = "domainclaims"
)

// DomainClaim binds a DNS domain, its name, and every name under it to one
// namespace: only that namespace's AppRoutes may route hosts in it, whatever
// another route claims or how old it is (Knative's ClusterDomainClaim, the
// role a Gateway listener's hostname plays for the routes it admits). A
// more specific claim wins over a broader one: shop.example.com bound to
// shop and example.com bound to web leave a.shop.example.com to shop.
// Cluster-scoped, so only a cluster admin makes them; a domain no claim
// covers goes to the oldest route that lists it. Names in the cluster
// domain need no claim: they always belong to their own namespace.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=dc,categories=ebb
// +kubebuilder:printcolumn:name="Namespace",type=string,JSONPath=`.spec.namespace`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.contains('.') && !self.metadata.name.endsWith('.cluster.local') && self.metadata.name != 'cluster.local' && !self.metadata.name.matches('[.](svc|pod)([.]|$)') && !self.metadata.name.matches('[.][0-9]+$')",message="name the domain to bind (such as shop.example.com): a name with a dot, outside the cluster domain (no svc or pod label after another), not an IP address"
type DomainClaim struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec DomainClaimSpec `json:"spec"`
}

// DomainClaimSpec is the namespace a domain is bound to.
type DomainClaimSpec struct {
	// Namespace whose AppRoutes alone may route the domain (this object's
	// name) and the names under it.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespace string `json:"namespace"`
}

// DomainClaimList is a list of DomainClaims.
//
// +kubebuilder:object:root=true
type DomainClaimList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []DomainClaim `json:"items"`
}
