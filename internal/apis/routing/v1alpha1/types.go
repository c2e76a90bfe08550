package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MaxColdStartTimeout is the one ceiling of a cold-start timeout: an app's
// (its annotation, its AppRoute's spec.coldStartTimeout, held to it by the
// CRD) and the activator's --cold-start-timeout. An activator holds the
// client's connection that long, and a terminating one keeps each request it
// holds until answered or timed out (the chart's grace period follows).
const MaxColdStartTimeout = 15 * time.Minute

// Condition types of an AppRoute.
const (
	// ConditionReady is True when the route is complete: its Service exists
	// and reaches the sidecar.
	ConditionReady = "Ready"
	// ConditionSidecarReachable is False when the Service targets the app's
	// port by number, so traffic bypasses the sidecar and is never counted.
	ConditionSidecarReachable = "SidecarReachable"
	// ConditionPropagated is set by the activators once their routing table
	// holds this route.
	ConditionPropagated = "Propagated"
	// ConditionConflicted is True when a host and path of the route is
	// served by an older AppRoute of the instance instead: its message names
	// them.
	ConditionConflicted = "Conflicted"
	// ConditionPodsInjected is False when pods of the app run without the
	// sidecar (they started before the namespace was labelled, or while the
	// webhook was down): their requests are not counted, and the scaler
	// keeps the app from scaling to zero until they are restarted.
	ConditionPodsInjected = "PodsInjected"
	// ConditionScaledByKEDA is False when no KEDA ScaledObject of the
	// namespace scales the app on its counts (an external-push trigger
	// whose app is the route's): nothing would wake it from zero.
	ConditionScaledByKEDA = "ScaledByKEDA"
	// ConditionFallbackReady is set when the app names a fallback
	// (<suffix>/fallback): True when the Service exists with a ClusterIP, a
	// selector and the TCP port held requests go to, and is no ebb app's
	// Service; False naming what is wrong (ServiceNotFound, ExternalName,
	// NoClusterIP, NoSelector, FallbackIsAppService, FallbackIsEbbApp,
	// NoTCPPort, NoSuchPort). spec.fallback is written only while it is
	// True. Absent without a fallback.
	ConditionFallbackReady = "FallbackReady"

	// ConditionAdmitted is set by the activator pools: True naming the pool
	// that serves the route (exactly one does), False when no pool's
	// selectors pick it (NoPoolSelects), with the pools it was tried
	// against.
	ConditionAdmitted = "Admitted"

	// ConditionIdle is set by the scalers: True when ebb sees nothing that
	// keeps the app active (NoRequests, BelowActivation; or
	// KeptUpByAnotherTrigger: another trigger of the ScaledObject, such as
	// KEDA's cron, keeps it up), False with the reason that does
	// (RequestsInFlight, RequestsHeld, RecentRequests, SidecarBypassed,
	// NeededByDependents: an app whose wakes name it has a live pod).
	ConditionIdle = "Idle"
)

// AppRoute routes hosts to one app: the activator reads it to hold and
// forward requests while the app is at zero, the scaler to find the app.
// The webhook creates it from the pod template's annotations and the
// namespace's Ingresses and HTTPRoutes that name the app's Service, and
// keeps it in sync with them and the Deployment that owns it.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=ar,categories=ebb
// +kubebuilder:printcolumn:name="Hosts",type=string,JSONPath=`.spec.hosts`
// +kubebuilder:printcolumn:name="Host paths",type=string,JSONPath=`.spec.hostPaths[*].host`,priority=1
// +kubebuilder:printcolumn:name="Service",type=string,JSONPath=`.spec.service.name`
// +kubebuilder:printcolumn:name="Target",type=string,JSONPath=`.spec.scaleTargetRef.name`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Pool",type=string,JSONPath=`.status.pools[0].name`
// +kubebuilder:printcolumn:name="Propagated",type=string,JSONPath=`.status.conditions[?(@.type=="Propagated")].status`
// +kubebuilder:printcolumn:name="Idle",type=string,JSONPath=`.status.conditions[?(@.type=="Idle")].status`
// +kubebuilder:printcolumn:name="Why",type=string,JSONPath=`.status.conditions[?(@.type=="Idle")].reason`
// +kubebuilder:printcolumn:name="Cold start",type=string,JSONPath=`.status.lastColdStart.total`,priority=1
// +kubebuilder:printcolumn:name="Endpoints",type=integer,JSONPath=`.status.readyEndpoints`
// +kubebuilder:printcolumn:name="Activator",type=boolean,JSONPath=`.status.activatorInPath`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type AppRoute struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec AppRouteSpec `json:"spec"`
	// +optional
	Status AppRouteStatus `json:"status,omitzero"`
}

// AppRouteSpec is what the webhook derives from the app's pod template.
type AppRouteSpec struct {
	// Hosts routed to the app: exact DNS names (hello.example.com) or
	// wildcards of one leading label (*.example.com). Empty means only the
	// Service's own cluster DNS names route to the app.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:Pattern=`^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Hosts []string `json:"hosts,omitempty"`

	// PathPrefixes restrict the route to requests whose path starts with one
	// of them. Empty means every path.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:Pattern=`^/`
	PathPrefixes []string `json:"pathPrefixes,omitempty"`

	// HostPaths are hosts with path prefixes of their own, each claimed on
	// its own (Hosts × PathPrefixes do not apply to them). The webhook
	// writes them from the Ingresses (networking.k8s.io/v1) and HTTPRoutes
	// (gateway.networking.k8s.io/v1) of the namespace whose backend is the
	// app's Service on the Service port that carries its traffic: each
	// rule's host or route's hostname with the rule's paths (Prefix,
	// ImplementationSpecific, PathPrefix as written, without a trailing
	// slash; Exact as a prefix; a RegularExpression match is skipped; a
	// rule without a path match is every path). A rule with no host, a
	// route with no hostnames and an Ingress's defaultBackend match every
	// host and are never claimed (the AppRoute gets a Warning event
	// HostsSkipped). A host may also be in Hosts: both claims stand.
	// +optional
	// +listType=map
	// +listMapKey=host
	// +kubebuilder:validation:MaxItems=64
	HostPaths []HostPaths `json:"hostPaths,omitempty"`

	// Service carries the app's traffic; its port must target the sidecar.
	// +optional
	Service ServiceReference `json:"service,omitzero"`

	// ScaleTargetRef is the Deployment that runs the app.
	ScaleTargetRef ScaleTargetReference `json:"scaleTargetRef"`

	// AppPort is the port the app container listens on behind the sidecar.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	AppPort int32 `json:"appPort"`

	// AppPortName is the name of the app's port, now carried by the sidecar;
	// a Service whose targetPort names it reaches the sidecar.
	// +optional
	AppPortName string `json:"appPortName,omitempty"`

	// QueueSize is how many requests an activator holds for the app while it
	// has no ready pod; 0 means the activator's default.
	// +optional
	// +kubebuilder:validation:Minimum=0
	QueueSize int32 `json:"queueSize,omitempty"`

	// ColdStartTimeout is how long an activator holds a request waiting for
	// a ready pod before answering 504; unset means the activator's default.
	// At most MaxColdStartTimeout (15m).
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s') && duration(self) <= duration('15m')",message="coldStartTimeout: want above 0s and at most 15m"
	ColdStartTimeout *metav1.Duration `json:"coldStartTimeout,omitempty"`

	// RequestTimeout bounds one whole exchange with the app, from the
	// request received to the end of the response, in the sidecar and in
	// the activator for a request it forwards (a cold start's wait is
	// bounded apart, by ColdStartTimeout): 504 before the response head,
	// the connection closed after it. Unset: no limit. From the pod
	// template's <suffix>/request-timeout.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="requestTimeout: want above 0s"
	RequestTimeout *metav1.Duration `json:"requestTimeout,omitempty"`

	// ResponseHeaderTimeout bounds the wait for the app's response head once
	// the request is sent, in the sidecar and the activator (504 after it).
	// Unset: their defaults (10m). From <suffix>/response-header-timeout.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="responseHeaderTimeout: want above 0s"
	ResponseHeaderTimeout *metav1.Duration `json:"responseHeaderTimeout,omitempty"`

	// StreamIdleTimeout closes both sides of an upgraded connection (a
	// WebSocket) or of an exchange whose body streams, when no byte has
	// passed either way for this long, so that a tunnel its client left
	// stops counting as in flight. Unset: the sidecar's and the
	// activator's default (1h). From <suffix>/stream-idle-timeout.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="streamIdleTimeout: want above 0s"
	StreamIdleTimeout *metav1.Duration `json:"streamIdleTimeout,omitempty"`

	// Concurrency is the most requests one pod's app is given at once; its
	// sidecar queues the rest (Knative's containerConcurrency). 0: no
	// limit. From <suffix>/concurrency.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Concurrency int32 `json:"concurrency,omitempty"`

	// Fallback is a Service of the namespace that a held request goes to
	// when the app has no ready pod within the cold-start timeout, or when
	// the app's hold queue is full. From <suffix>/fallback.
	// +optional
	Fallback *ServiceReference `json:"fallback,omitempty"`

	// StaticResponses are the app's RoutePolicy's rules: answers the
	// activator gives itself (AtZero while the app has no ready pod,
	// Always at any time) without waking or counting the app.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	StaticResponses []StaticResponse `json:"staticResponses,omitempty"`

	// Placeholder is the app's RoutePolicy's placeholder page, its body
	// read from the ConfigMap.
	// +optional
	Placeholder *Placeholder `json:"placeholder,omitempty"`

	// Wakes are the apps this app needs, from its RoutePolicy's wakes,
	// each with its namespace, the ones another namespace does not let it
	// wake left out (status.dependencies names them). The apps they need
	// are in their own AppRoutes.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	Wakes []Dependency `json:"wakes,omitempty"`

	// WakeOrder is the RoutePolicy's wakeOrder: Together or Ordered.
	// +optional
	// +kubebuilder:validation:Enum=Together;Ordered
	WakeOrder WakeOrder `json:"wakeOrder,omitempty"`

	// Policy names the RoutePolicy the fields above come from.
	// +optional
	Policy string `json:"policy,omitempty"`
}

// Placeholder is a placeholder page as the activator serves it.
type Placeholder struct {
	// Status of the page: 200 to 599 but 204 and 304, which have no body.
	// +kubebuilder:validation:Minimum=200
	// +kubebuilder:validation:Maximum=599
	// +kubebuilder:validation:XValidation:rule="!(self in [204, 304])",message="spec.placeholder.status: a 204 or 304 answer has no body, and a placeholder page is a body; choose another status, such as 503"
	Status int32 `json:"status"`
	// Headers of the page; framing headers are refused, as in a
	// RoutePolicy's placeholder.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:XValidation:rule="self.all(h, !(h.name.lowerAscii() in ['content-length', 'transfer-encoding', 'connection', 'keep-alive', 'upgrade', 'te', 'trailer', 'proxy-connection']))",message="spec.placeholder.headers: ebb writes the framing itself; remove Content-Length, Transfer-Encoding, Connection, Keep-Alive, Upgrade, TE, Trailer and Proxy-Connection"
	Headers []HTTPHeader `json:"headers,omitempty"`
	// +kubebuilder:validation:MaxLength=65536
	Body string `json:"body"`
}

// HostPaths is one host of an AppRoute with its own path prefixes.
type HostPaths struct {
	// Host is an exact DNS name or a wildcard of one leading label, as in
	// spec.hosts.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Host string `json:"host"`
	// PathPrefixes restrict the host to requests whose path starts with one
	// of them. Empty means every path.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:Pattern=`^/`
	PathPrefixes []string `json:"pathPrefixes,omitempty"`
}

// ServiceReference names a Service in the AppRoute's namespace and the port
// of it that carries the app's traffic.
type ServiceReference struct {
	// Name of the Service.
	Name string `json:"name"`
	// Port is the Service port (its number) that carries the app's traffic.
	// +optional
	Port int32 `json:"port,omitempty"`
}

// ScaleTargetReference names the workload in the AppRoute's namespace
// whose pods serve the app: a Deployment, a StatefulSet, or a resource of
// a kind the instance is told of that has the scale subresource.
type ScaleTargetReference struct {
	// APIVersion of the target, such as apps/v1.
	// +kubebuilder:default="apps/v1"
	APIVersion string `json:"apiVersion"`
	// Kind of the target, such as Deployment or StatefulSet.
	// +kubebuilder:default="Deployment"
	Kind string `json:"kind"`
	// Name of the target.
	Name string `json:"name"`
}

// AppRouteStatus is filled by the webhook's AppRoute controller (Ready,
// SidecarReachable, ReadyEndpoints, ActivatorInPath), by the activators
// (Admitted, Propagated, Pools, LastColdStart) and by the scalers (Idle).
type AppRouteStatus struct {
	// ObservedGeneration is the generation the controller last acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions: Ready, SidecarReachable, Conflicted, PodsInjected,
	// ScaledByKEDA, FallbackReady, Admitted, Propagated, Idle.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// ReadyEndpoints counts the ready app endpoints of the Service (the
	// activator's hand-off endpoints excluded).
	// +optional
	ReadyEndpoints int32 `json:"readyEndpoints"`

	// ActivatorInPath is true while the activator's hand-off EndpointSlice is
	// published for the Service, so requests flow through the activator.
	// +optional
	ActivatorInPath bool `json:"activatorInPath"`

	// Pools is what activator pools say of the route, one entry per pool,
	// each written by that pool (as Gateway API's status.parents[]): the
	// pool that admits it, with Admitted and Propagated conditions. During
	// a move from one pool to another both may show for a moment.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	Pools []PoolStatus `json:"pools,omitempty"`

	// HostSources says, for each host of spec.hosts and spec.hostPaths,
	// where it came from. Written by the webhook.
	// +optional
	// +listType=map
	// +listMapKey=host
	// +kubebuilder:validation:MaxItems=128
	HostSources []HostSource `json:"hostSources,omitempty"`

	// LastColdStart is where the last cold start an activator saw through
	// spent its time, phase by phase.
	// +optional
	LastColdStart *ColdStart `json:"lastColdStart,omitempty"`

	// Dependencies is the tree of apps this app wakes (spec.wakes and
	// theirs, transitively), one entry per app, each naming the app that
	// needs it, and what it is waiting on. Written by the webhook.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	Dependencies []DependencyStatus `json:"dependencies,omitempty"`
}

// DependencyStatus is one app of an AppRoute's dependency tree.
type DependencyStatus struct {
	// App and Namespace name the app.
	App       string `json:"app"`
	Namespace string `json:"namespace"`
	// NeededBy is the app whose wakes name it, namespace/name: this
	// AppRoute's app for a direct dependency.
	NeededBy string `json:"neededBy"`
	// State: Ready (it has a ready pod), AtZero, Waking (scaled up, no
	// ready pod yet), Missing (no AppRoute of that name), NotPermitted
	// (its namespace does not list this one in wakeableFrom).
	State DependencyState `json:"state"`
	// ReadyEndpoints counts its ready app endpoints.
	// +optional
	ReadyEndpoints int32 `json:"readyEndpoints,omitempty"`
	// WaitingOn says what it waits for before it can serve, if anything:
	// "a ready pod", "its dependency <namespace>/<name>", ...
	// +optional
	WaitingOn string `json:"waitingOn,omitempty"`
}

// DependencyState is what a dependency of an app is doing.
type DependencyState string

const (
	DependencyReady        DependencyState = "Ready"
	DependencyAtZero       DependencyState = "AtZero"
	DependencyWaking       DependencyState = "Waking"
	DependencyMissing      DependencyState = "Missing"
	DependencyNotPermitted DependencyState = "NotPermitted"
)

// HostSource is where one host of an AppRoute came from.
type HostSource struct {
	// Host as in spec.hosts or spec.hostPaths.
	Host string `json:"host"`
	// From lists the sources, sorted: "annotation <suffix>/hosts" (the pod
	// template's), "Ingress/<name>", "HTTPRoute/<name>" (in the AppRoute's
	// namespace).
	// +listType=atomic
	From []string `json:"from"`
}

// PoolStatus is one activator pool's view of a route.
type PoolStatus struct {
	// Name of the pool.
	Name string `json:"name"`
	// Conditions: Admitted (the pool serves the route and publishes its
	// hand-off slice), Propagated (every ready replica of the pool serves
	// the route's current generation).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ColdStart is one cold start as an activator observed it: from the first
// request held while the app had no ready pod to the first response byte
// forwarded, in phases that follow one another and add up to Total.
type ColdStart struct {
	// Began is when the first request was held.
	Began metav1.MicroTime `json:"began"`
	// Total is from Began to the first response byte forwarded.
	Total metav1.Duration `json:"total"`
	// Phases, in order: ScalerTold, Scaled, PodCreated, PodScheduled,
	// ContainersStarted, SidecarReady, FirstByte. A phase the activator
	// did not see on its own (it came with the next) lasts 0s.
	// +listType=atomic
	Phases []ColdStartPhase `json:"phases"`
	// Activator is the activator pod that observed it.
	// +optional
	Activator string `json:"activator,omitempty"`
}

// ColdStartPhase is one phase of a cold start: the time from the end of
// the phase before it to the moment Name was observed.
type ColdStartPhase struct {
	Name     string          `json:"name"`
	Duration metav1.Duration `json:"duration"`
}

// AppRouteList is a list of AppRoutes.
//
// +kubebuilder:object:root=true
type AppRouteList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AppRoute `json:"items"`
}
