package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FederatedScale names of the type in any group.
const (
	FederatedScaleKind     = "FederatedScale"
	FederatedScaleListKind = "FederatedScaleList"
	FederatedScaleResource = "federatedscales"
)

// Condition types of a FederatedScale.
const (
	// ConditionMembersReachable is False while a member cluster cannot be
	// read (its message names it and why): its share of the global min is
	// carried by the others until it is back.
	ConditionMembersReachable = "MembersReachable"
	// ConditionBoundsWritten is True when every reachable member's
	// ScaledObject has the min/max the controller gave it.
	ConditionBoundsWritten = "BoundsWritten"
)

// FederatedScale splits one app's replica bounds across member clusters:
// every member runs the app with its own KEDA ScaledObject of the same name
// in this object's namespace and scales it from zero and back on its own
// requests, within the min/max share the federation controller writes into
// it. The controller moves max headroom to a member that sits at its max
// from members that do not use theirs. Nothing on the request path depends
// on the cluster that holds this object: when it or the controller is
// down, every member keeps its last bounds.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=fs,categories=ebb
// +kubebuilder:printcolumn:name="ScaledObject",type=string,JSONPath=`.spec.scaledObjectName`
// +kubebuilder:printcolumn:name="Min",type=integer,JSONPath=`.spec.minReplicas`
// +kubebuilder:printcolumn:name="Max",type=integer,JSONPath=`.spec.maxReplicas`
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.status.replicas`
// +kubebuilder:printcolumn:name="Reachable",type=string,JSONPath=`.status.conditions[?(@.type=="MembersReachable")].status`
// +kubebuilder:printcolumn:name="Moved",type=date,JSONPath=`.status.lastMove`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type FederatedScale struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec FederatedScaleSpec `json:"spec"`
	// +optional
	Status FederatedScaleStatus `json:"status,omitempty"`
}

// FederatedScaleSpec is the app's global bounds and its member clusters.
//
// +kubebuilder:validation:XValidation:rule="self.minReplicas <= self.maxReplicas",message="minReplicas must not exceed maxReplicas"
// +kubebuilder:validation:XValidation:rule="self.maxReplicas >= size(self.clusters)",message="maxReplicas must give every cluster at least 1"
type FederatedScaleSpec struct {
	// ScaledObjectName is the KEDA ScaledObject that scales the app in
	// every member cluster, in this object's namespace. The controller
	// writes its spec.minReplicaCount and spec.maxReplicaCount only.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	ScaledObjectName string `json:"scaledObjectName"`
	// MinReplicas is the least the members run together; 0 lets every
	// member go to zero and wake on its own requests.
	// +kubebuilder:validation:Minimum=0
	MinReplicas int32 `json:"minReplicas"`
	// MaxReplicas is the most the members' maxima add up to.
	// +kubebuilder:validation:Minimum=1
	MaxReplicas int32 `json:"maxReplicas"`
	// Clusters are the member clusters, each registered with the
	// controller by a kubeconfig Secret (see docs/several-clusters.md).
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +listType=map
	// +listMapKey=name
	Clusters []FederatedCluster `json:"clusters"`
	// Rebalance tunes how max headroom moves.
	// +optional
	Rebalance Rebalance `json:"rebalance,omitempty"`
}

// FederatedCluster is one member cluster and what bounds its share.
type FederatedCluster struct {
	// Name is the member's registration: the Secret in the controller's
	// namespace labelled <suffix>/member-cluster=<name>.
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// Weight splits the global min and max at first (default 1).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +kubebuilder:default=1
	// +optional
	Weight int32 `json:"weight,omitempty"`
	// MinReplicas is the least this member's share of min may be.
	// +kubebuilder:validation:Minimum=0
	// +optional
	MinReplicas *int32 `json:"minReplicas,omitempty"`
	// MaxReplicas is the most this member's share of max may be.
	// +kubebuilder:validation:Minimum=1
	// +optional
	MaxReplicas *int32 `json:"maxReplicas,omitempty"`
}

// Rebalance is how max headroom moves between members.
type Rebalance struct {
	// StabilizationSeconds: a member must sit at its max this long before
	// headroom moves to it, and a member gives up only what it has not used
	// within this long (default 15).
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=3600
	// +optional
	StabilizationSeconds *int32 `json:"stabilizationSeconds,omitempty"`
	// UnreachableSeconds: a member that cannot be read this long loses its
	// share of the global min to the others until it is back (default 10).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600
	// +optional
	UnreachableSeconds *int32 `json:"unreachableSeconds,omitempty"`
}

// FederatedScaleStatus is the split as the controller last wrote and read it.
type FederatedScaleStatus struct {
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Replicas is the members' current replicas added up.
	// +optional
	Replicas int32 `json:"replicas"`
	// Clusters is each member's share and local picture.
	// +listType=map
	// +listMapKey=name
	// +optional
	Clusters []FederatedClusterStatus `json:"clusters,omitempty"`
	// LastMove is when max headroom last moved between members.
	// +optional
	LastMove *metav1.Time `json:"lastMove,omitempty"`
	// LastMoveMessage says what moved, from where to where and why.
	// +optional
	LastMoveMessage string `json:"lastMoveMessage,omitempty"`
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// FederatedClusterStatus is one member's share and what the controller last
// read there.
type FederatedClusterStatus struct {
	Name string `json:"name"`
	// MinReplicas and MaxReplicas are this member's share: what its
	// ScaledObject is given.
	MinReplicas int32 `json:"minReplicas"`
	MaxReplicas int32 `json:"maxReplicas"`
	// Reachable is false while the member cannot be read; Message says why.
	Reachable bool `json:"reachable"`
	// +optional
	Message string `json:"message,omitempty"`
	// CurrentReplicas and DesiredReplicas are the member's HPA's (0 at zero).
	// +optional
	CurrentReplicas int32 `json:"currentReplicas"`
	// +optional
	DesiredReplicas int32 `json:"desiredReplicas"`
	// AtMax is true while the member's autoscaler wants more than its max.
	// +optional
	AtMax bool `json:"atMax"`
	// Requests is the app's requests in flight and held in the member, as
	// its ebb scaler counts them (absent when the member's scaler is not
	// registered or not read).
	// +optional
	Requests *int64 `json:"requests,omitempty"`
}

// FederatedScaleList is a list of FederatedScales.
//
// +kubebuilder:object:root=true
type FederatedScaleList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []FederatedScale `json:"items"`
}
