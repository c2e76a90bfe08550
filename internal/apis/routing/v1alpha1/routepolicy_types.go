package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RoutePolicy names of the type in any group.
const (
	RoutePolicyKind     = "RoutePolicy"
	RoutePolicyListKind = "RoutePolicyList"
	RoutePolicyResource = "routepolicies"
)

// Bounds of a RoutePolicy, held by the CRD's schema.
const (
	// MaxStaticResponsesBytes bounds the bodies and headers of a policy's
	// static responses together: every pod's sidecar carries them in its
	// environment.
	MaxStaticResponsesBytes = 16 << 10
	MaxStaticResponses      = 16
	MaxStaticBodyBytes      = 4096
	MaxHeadersPerResponse   = 16
	MaxHeaderMatches        = 8
	MaxPlaceholderBodySize  = 64 << 10
)

// Conditions of a RoutePolicy.
const (
	// ConditionAccepted is True when the webhook has copied the policy into
	// its app's AppRoute, False with the reason it could not (no such app,
	// the placeholder's ConfigMap or key missing or too large).
	ConditionAccepted = "Accepted"
)

// When a static response answers (StaticResponse.When).
const (
	// AnswerAtZero answers only while the app has no ready pod (the
	// activator answers); once the app is up, a matching request goes to
	// the app, and is not counted unless its rule matches headers.
	AnswerAtZero = "AtZero"
	// AnswerAlways answers every matching request, at zero (the activator)
	// and warm (the sidecar): the app never sees it.
	AnswerAlways = "Always"
)

// RoutePolicy holds the structured settings of one app's route, the ones
// that do not fit an annotation: answers ebb gives itself without waking
// or counting the app (static responses, for load balancers' health checks
// and uptime probes), and the page a browser sees during a cold start. It
// names its app; the webhook copies it into the app's AppRoute, where the
// activators read it, and gives the rules to the sidecars of the pods it
// injects from then on (a running pod keeps the rules it started with).
// One policy per app: the oldest one naming an app is used.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=rp,categories=ebb
// +kubebuilder:printcolumn:name="App",type=string,JSONPath=`.spec.app`
// +kubebuilder:printcolumn:name="Static",type=integer,JSONPath=`.spec.staticResponses.size()`,priority=1
// +kubebuilder:printcolumn:name="Accepted",type=string,JSONPath=`.status.conditions[?(@.type=="Accepted")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Accepted")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type RoutePolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec RoutePolicySpec `json:"spec"`
	// +optional
	Status RoutePolicyStatus `json:"status,omitzero"`
}

// RoutePolicySpec is what a RoutePolicy sets for its app.
type RoutePolicySpec struct {
	// App is the app in the policy's namespace: its <suffix>/app label,
	// which names its AppRoute.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	App string `json:"app"`

	// StaticResponses are answers ebb gives itself; the first rule that
	// matches a request answers it. A request a rule answers never wakes
	// the app and is never counted.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:XValidation:rule="self.map(r, (has(r.response.body) ? bytes(r.response.body).size() : 0) + (has(r.response.headers) ? r.response.headers.map(h, size(h.name) + size(h.value)).sum() : 0) + (has(r.match.headers) ? r.match.headers.map(h, size(h.name) + size(h.value)).sum() : 0)).sum() <= 16384",message="staticResponses: their bodies and headers come to more than 16384 bytes in all (every pod's sidecar carries them); shorten them, or let the app serve the larger pages"
	StaticResponses []StaticResponse `json:"staticResponses,omitempty"`

	// Placeholder is the answer a browser (a GET that accepts text/html)
	// gets while the app wakes, instead of waiting: the activator keeps
	// the app waking and the page reloads itself (give it a Refresh
	// header) until the app answers.
	// +optional
	Placeholder *PlaceholderSource `json:"placeholder,omitempty"`

	// Wakes are the apps this app needs to serve. A request that wakes
	// this app wakes them too, and theirs in turn, and is released only
	// once each has a ready pod. Each stays up while an app that needs it
	// is up. A list that closes a cycle, or names an app twice, is refused
	// (by the webhook: a CEL rule comparing every pair of wakes is past
	// the API server's cost budget beside the static responses' rules, and
	// the CRD would not install).
	// +optional
	// +kubebuilder:validation:MaxItems=16
	Wakes []Dependency `json:"wakes,omitempty"`

	// WakeOrder is how the apps of Wakes are woken: Together (the
	// default) scales every one up at once; Ordered scales an app up only
	// once every app it needs has a ready pod, for apps that fail at
	// start without them: this app whenever it is woken (as another
	// app's dependency too), and every app that a request held for it
	// wakes, transitively.
	// +optional
	// +kubebuilder:validation:Enum=Together;Ordered
	WakeOrder WakeOrder `json:"wakeOrder,omitempty"`

	// WakeableFrom are the other namespaces whose apps may name this app
	// in their wakes. Apps of its own namespace always may; an app of
	// another namespace not listed here is not woken for them.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +listType=set
	WakeableFrom []string `json:"wakeableFrom,omitempty"`
}

// WakeOrder is how an app's dependencies are woken.
type WakeOrder string

const (
	// WakeTogether scales the app and every app it needs up at once.
	WakeTogether WakeOrder = "Together"
	// WakeOrdered scales an app up only once every app it needs is ready.
	WakeOrdered WakeOrder = "Ordered"
)

// Dependency names an app another app needs: its <suffix>/app label, in
// the same namespace unless Namespace says another of the same instance.
type Dependency struct {
	// App is the app's <suffix>/app label (its AppRoute's name).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	App string `json:"app"`
	// Namespace of the app; the RoutePolicy's own when empty.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespace string `json:"namespace,omitempty"`
}

// StaticResponse is one rule: which requests, when, and the answer.
type StaticResponse struct {
	// Name of the rule, unique in the policy; in logs and metrics.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`
	// Match says which requests the rule answers, as a Gateway API
	// HTTPRouteMatch does: every condition given must hold.
	Match StaticMatch `json:"match"`
	// When the rule answers: AtZero (while the app has no ready pod) or
	// Always.
	// +kubebuilder:default=AtZero
	// +kubebuilder:validation:Enum=AtZero;Always
	// +optional
	When string `json:"when,omitempty"`
	// Response is the answer.
	Response StaticAnswer `json:"response"`
}

// StaticMatch is a request match in the shape of Gateway API's
// HTTPRouteMatch: a path, a method and headers, all optional; a match
// with none of them matches every request.
type StaticMatch struct {
	// Path matches the request's path (without the query).
	// +optional
	Path *PathMatch `json:"path,omitempty"`
	// Method matches the request method exactly.
	// +optional
	// +kubebuilder:validation:Enum=GET;HEAD;POST;PUT;DELETE;CONNECT;OPTIONS;TRACE;PATCH
	Method string `json:"method,omitempty"`
	// Headers must each be present with exactly this value (names match
	// without regard to case). A rule with headers never exempts a request
	// it does not answer from counting: a client chooses its headers.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:XValidation:rule="self.all(h, self.exists_one(g, g.name.lowerAscii() == h.name.lowerAscii()))",message="match.headers: a header name is given twice (names match without regard to case); give each header once"
	Headers []HTTPHeader `json:"headers,omitempty"`
}

// Path match types (PathMatch.Type), as Gateway API's.
const (
	PathMatchExact      = "Exact"
	PathMatchPathPrefix = "PathPrefix"
)

// PathMatch matches a request path exactly or by prefix. A prefix matches
// by whole path elements, as Gateway API's PathPrefix: /healthz matches
// /healthz and /healthz/live, not /healthzx.
// +kubebuilder:validation:XValidation:rule="self.type != 'PathPrefix' || self.value == '/' || !self.value.endsWith('/')",message="path.value: a PathPrefix has no trailing slash (write /healthz, not /healthz/)"
type PathMatch struct {
	// Type is Exact or PathPrefix.
	// +kubebuilder:default=PathPrefix
	// +kubebuilder:validation:Enum=Exact;PathPrefix
	// +optional
	Type string `json:"type,omitempty"`
	// Value is the path, starting with /.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="self.startsWith('/') && !self.contains('?') && !self.contains('#') && !self.contains('//') && !self.contains('/./') && !self.contains('/../') && !self.endsWith('/..') && !self.endsWith('/.')",message="path.value: an absolute path starting with /, without a query, a fragment, an empty segment, . or .."
	// +kubebuilder:validation:XValidation:rule="self.matches('^[!-~]*$') && !self.contains('%') && !self.contains('\\\\') && !self.contains(';')",message="path.value: visible ASCII without percent-encoding, a backslash, a ';' or a space (a request path not in that form matches no rule); write the plain path, such as /healthz"
	Value string `json:"value"`
}

// HTTPHeader is a header name and value.
type HTTPHeader struct {
	// Name is a header field name (a token).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9!#$%&'*+.^_|~-]+$`
	Name string `json:"name"`
	// Value is the header's value: visible ASCII and spaces, no line breaks.
	// +kubebuilder:validation:MaxLength=4096
	// +kubebuilder:validation:Pattern=`^[\x20-\x7e]*$`
	// +kubebuilder:validation:XValidation:rule="!self.startsWith(' ') && !self.endsWith(' ')",message="value: no space at its start or end; remove it"
	Value string `json:"value"`
}

// StaticAnswer is a fixed response.
// +kubebuilder:validation:XValidation:rule="!has(self.status) || !(self.status in [204, 304]) || !has(self.body) || size(self.body) == 0",message="response.body: a 204 or 304 answer has no body; remove the body or choose another status"
type StaticAnswer struct {
	// Status is the response's status code.
	// +kubebuilder:default=200
	// +kubebuilder:validation:Minimum=200
	// +kubebuilder:validation:Maximum=599
	// +optional
	Status int32 `json:"status,omitempty"`
	// Headers of the response. ebb writes the framing itself: Content-Length,
	// Transfer-Encoding, Connection and other hop-by-hop headers are refused.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:XValidation:rule="self.all(h, !(h.name.lowerAscii() in ['content-length', 'transfer-encoding', 'connection', 'keep-alive', 'upgrade', 'te', 'trailer', 'proxy-connection']))",message="response.headers: ebb writes the framing itself; remove Content-Length, Transfer-Encoding, Connection, Keep-Alive, Upgrade, TE, Trailer and Proxy-Connection"
	Headers []HTTPHeader `json:"headers,omitempty"`
	// Body of the response, at most 4096 bytes; none for status 204 and 304.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	// +kubebuilder:validation:XValidation:rule="bytes(self).size() <= 4096",message="response.body: at most 4096 bytes (UTF-8); shorten it, or serve a larger page from the app"
	Body string `json:"body,omitempty"`
}

// PlaceholderSource is a placeholder page whose body is in a ConfigMap.
type PlaceholderSource struct {
	// Status of the page; 503 by default, so that no cache or crawler
	// takes it for the app's own answer. Not 204 or 304, which have no
	// body.
	// +kubebuilder:default=503
	// +kubebuilder:validation:Minimum=200
	// +kubebuilder:validation:Maximum=599
	// +kubebuilder:validation:XValidation:rule="!(self in [204, 304])",message="placeholder.status: a 204 or 304 answer has no body, and a placeholder page is a body; choose another status, such as 503"
	// +optional
	Status int32 `json:"status,omitempty"`
	// Headers of the page, such as Refresh: 2 to reload it. Content-Type
	// is text/html; charset=utf-8 unless given here; framing headers are
	// refused as in static responses.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:XValidation:rule="self.all(h, !(h.name.lowerAscii() in ['content-length', 'transfer-encoding', 'connection', 'keep-alive', 'upgrade', 'te', 'trailer', 'proxy-connection']))",message="placeholder.headers: ebb writes the framing itself; remove Content-Length, Transfer-Encoding, Connection, Keep-Alive, Upgrade, TE, Trailer and Proxy-Connection"
	Headers []HTTPHeader `json:"headers,omitempty"`
	// ConfigMapKeyRef names the ConfigMap (in the policy's namespace) and
	// key holding the page's body, at most 64 KiB.
	ConfigMapKeyRef ConfigMapKeyRef `json:"configMapKeyRef"`
}

// ConfigMapKeyRef names a key of a ConfigMap in the same namespace.
type ConfigMapKeyRef struct {
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key"`
}

// RoutePolicyStatus is written by the webhook.
type RoutePolicyStatus struct {
	// ObservedGeneration is the generation the webhook last acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Accepted.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// RoutePolicyList is a list of RoutePolicies.
//
// +kubebuilder:object:root=true
type RoutePolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RoutePolicy `json:"items"`
}
