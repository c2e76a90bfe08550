package inject

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/routing"
)

// Annotation names, each prefixed with "<suffix>/" (groupsuffix.Names.Key).
// The hosts annotation comes from groupsuffix.Names.HostsAnnotation.
const (
	AnnotationPort             = "port"
	AnnotationPaths            = "paths"
	AnnotationService          = "service"
	AnnotationQueueSize        = "queue-size"
	AnnotationColdStartTimeout = "cold-start-timeout"
	AnnotationDrainTimeout     = "drain-timeout"
	// AnnotationResponseHeaderTimeout bounds the sidecar's wait for the
	// app's response head.
	AnnotationResponseHeaderTimeout = "response-header-timeout"
	// AnnotationRequestTimeout bounds one whole exchange with the app
	// (sidecar and activator; 504 before the response head).
	AnnotationRequestTimeout = "request-timeout"
	// AnnotationStreamIdleTimeout closes an upgraded connection or a
	// streaming exchange after this long without a byte either way.
	AnnotationStreamIdleTimeout = "stream-idle-timeout"
	// AnnotationConcurrency is the most requests one pod's app is given at
	// once (0: no limit); AnnotationConcurrencyQueue how many more its
	// sidecar queues (503 with Retry-After past them).
	AnnotationConcurrency      = "concurrency"
	AnnotationConcurrencyQueue = "concurrency-queue"
	// AnnotationFallback ("<service>" or "<service>:<port>") is the Service
	// a held request goes to when the app does not come up in time or its
	// hold queue is full.
	AnnotationFallback = "fallback"
	// AnnotationPlaceholder "true" shows browsers a waiting page during a
	// cold start (the activator reads it from the AppRoute).
	AnnotationPlaceholder = "placeholder"
	// AnnotationRouteLabels ("team=pay,tier=gold") are labels the AppRoute
	// gets: activator pools select the routes they serve by them.
	AnnotationRouteLabels = "route-labels"
)

// Limits on annotation values.
const (
	MaxHosts            = 64
	MaxPaths            = 64
	MaxRouteLabels      = 16
	MaxQueueSize        = 1_000_000
	MaxColdStartTimeout = routingv1alpha1.MaxColdStartTimeout // the one ceiling, the activator's too
	MaxDrainTimeout     = 10 * time.Minute
	// MaxResponseHeaderTimeout: longer than any live app needs for a
	// response head (a longer job streams, or answers at once).
	MaxResponseHeaderTimeout = time.Hour
	// MaxRequestTimeout and MaxStreamIdleTimeout: a day; unset is no limit
	// (request) or the sidecar's and activator's default (stream idle, 1h).
	MaxRequestTimeout    = 24 * time.Hour
	MaxStreamIdleTimeout = 24 * time.Hour
	MaxConcurrency       = 10_000
	MaxConcurrencyQueue  = 100_000
)

// App is what a pod (or pod template) says about its app through ebb's label
// and annotations, validated.
type App struct {
	// Name is the value of the <suffix>/app label; it names the AppRoute.
	Name string
	// Hosts and PathPrefixes as listed (upper case is refused), without duplicates.
	Hosts        []string
	PathPrefixes []string
	// Container is the name of the container that declares the app port.
	Container string
	// Port and PortName are the app's port as declared by Container; PortName
	// is empty when the port has no name.
	Port     int32
	PortName string
	// Service is the <suffix>/service annotation, empty if unset.
	Service string
	// QueueSize and ColdStartTimeout are 0 when unset (activator defaults).
	QueueSize        int32
	ColdStartTimeout time.Duration
	// DrainTimeout is the <suffix>/drain-timeout annotation; DrainTimeoutSet
	// says whether the annotation is present (0s is a valid value: no drain).
	DrainTimeout    time.Duration
	DrainTimeoutSet bool
	// ResponseHeaderTimeout is the <suffix>/response-header-timeout
	// annotation, 0 when unset (the sidecar's default); "0s" is refused.
	ResponseHeaderTimeout time.Duration
	// RequestTimeout and StreamIdleTimeout are their annotations, 0 when
	// unset (the sidecar's and the activator's defaults).
	RequestTimeout, StreamIdleTimeout time.Duration
	// Concurrency and ConcurrencyQueue are their annotations;
	// ConcurrencySet and ConcurrencyQueueSet say whether they are present
	// (unset: the sidecar's defaults).
	Concurrency, ConcurrencyQueue       int32
	ConcurrencySet, ConcurrencyQueueSet bool
	// Fallback and FallbackPort are the <suffix>/fallback annotation's
	// Service and port (0: not given), "" when unset.
	Fallback     string
	FallbackPort int32
	// Placeholder is the <suffix>/placeholder annotation.
	Placeholder bool
	// RouteLabels are the <suffix>/route-labels annotation's labels, nil
	// when unset.
	RouteLabels map[string]string
}

// Problem is one thing wrong with a pod's ebb label or annotations.
type Problem struct {
	// Key is the label or annotation key at fault ("" for the pod as a whole).
	Key string
	// Kind is "annotation" or "label".
	Kind string
	// Value is the offending value.
	Value string
	// Reason says what is wrong; Fix how to put it right.
	Reason, Fix string
}

func (p Problem) String() string {
	var b strings.Builder
	switch {
	case p.Key != "" && p.Value != "":
		fmt.Fprintf(&b, "%s %s=%q: ", p.Kind, p.Key, p.Value)
	case p.Key != "":
		fmt.Fprintf(&b, "%s %s: ", p.Kind, p.Key)
	}
	b.WriteString(p.Reason)
	if p.Fix != "" {
		b.WriteString("; fix: ")
		b.WriteString(p.Fix)
	}
	return b.String()
}

// RefusalError lists every problem found; the webhook refuses the pod with
// its message.
type RefusalError struct {
	Problems []Problem
}

func (e *RefusalError) Error() string {
	parts := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		parts[i] = p.String()
	}
	return "ebb cannot inject this pod: " + strings.Join(parts, "; and ")
}

// ParseApp reads and validates the app label and the annotations of a pod or
// pod template in namespace. Every problem is reported at once in a
// *RefusalError.
func ParseApp(namespace string, meta *metav1.ObjectMeta, spec *corev1.PodSpec, cfg Config) (App, error) {
	n := cfg.Names
	var app App
	var problems []Problem
	bad := func(kind, key, value, reason, fix string) {
		problems = append(problems, Problem{Kind: kind, Key: key, Value: value, Reason: reason, Fix: fix})
	}
	ann := func(name string) (string, bool) {
		v, ok := meta.Annotations[n.Key(name)]
		return strings.TrimSpace(v), ok
	}

	app.Name = meta.Labels[n.AppLabel()]
	if errs := validation.IsDNS1123Label(app.Name); len(errs) > 0 {
		bad("label", n.AppLabel(), app.Name, "the app name "+strings.Join(errs, ", "),
			"name the app with a lowercase DNS label such as \"hello\"")
	}

	if v, ok := meta.Annotations[n.HostsAnnotation()]; ok {
		hosts, probs := parseHosts(v, namespace)
		app.Hosts = hosts
		for _, p := range probs {
			bad("annotation", n.HostsAnnotation(), v, p, "list lowercase DNS names or *.wildcards separated by commas, e.g. \"hello.example.com,*.hello.example.com\"; the app's Service's own names and ClusterIP need no listing")
		}
	}
	if v, ok := ann(AnnotationPaths); ok {
		paths, probs := parsePaths(v)
		app.PathPrefixes = paths
		for _, p := range probs {
			bad("annotation", n.Key(AnnotationPaths), v, p, "list path prefixes starting with \"/\" separated by commas, e.g. \"/api,/static\"")
		}
	}
	if v, ok := ann(AnnotationService); ok {
		if errs := validation.IsDNS1035Label(v); len(errs) > 0 {
			bad("annotation", n.Key(AnnotationService), v, "not a Service name: "+strings.Join(errs, ", "),
				"name the Service that carries the app's traffic, or remove the annotation to have ebb find it by selector")
		}
		app.Service = v
	}
	if v, ok := ann(AnnotationQueueSize); ok {
		q, err := strconv.ParseInt(v, 10, 32)
		if err != nil || q < 1 || q > MaxQueueSize {
			bad("annotation", n.Key(AnnotationQueueSize), v, "not a whole number from 1 to "+strconv.Itoa(MaxQueueSize),
				"set how many requests the activator may hold for the app, e.g. \"1000\"")
		}
		app.QueueSize = int32(q)
	}
	if v, ok := ann(AnnotationColdStartTimeout); ok {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 || d > MaxColdStartTimeout {
			bad("annotation", n.Key(AnnotationColdStartTimeout), v, "not a duration above 0s and at most "+MaxColdStartTimeout.String(),
				"set a Go duration such as \"30s\" or \"2m\"")
			d = 0
		}
		app.ColdStartTimeout = d
	}
	if v, ok := ann(AnnotationDrainTimeout); ok {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 || d > MaxDrainTimeout {
			bad("annotation", n.Key(AnnotationDrainTimeout), v, "not a duration from 0s to "+MaxDrainTimeout.String(),
				"set a Go duration shorter than the pod's terminationGracePeriodSeconds, such as \"20s\"")
			d = 0
		}
		app.DrainTimeout, app.DrainTimeoutSet = d, true
	}
	if v, ok := ann(AnnotationResponseHeaderTimeout); ok {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 || d > MaxResponseHeaderTimeout {
			bad("annotation", n.Key(AnnotationResponseHeaderTimeout), v, "not a duration above 0s and at most "+MaxResponseHeaderTimeout.String(),
				"set a Go duration longer than the app's slowest response takes to start, such as \"2m\"")
			d = 0
		}
		app.ResponseHeaderTimeout = d
	}
	duration := func(key string, most time.Duration, fix string) time.Duration {
		v, ok := ann(key)
		if !ok {
			return 0
		}
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 || d > most {
			bad("annotation", n.Key(key), v, "not a duration above 0s and at most "+most.String(), fix)
			return 0
		}
		return d
	}
	app.RequestTimeout = duration(AnnotationRequestTimeout, MaxRequestTimeout,
		"set a Go duration longer than the app's longest whole request, such as \"5m\", or remove the annotation for no limit")
	app.StreamIdleTimeout = duration(AnnotationStreamIdleTimeout, MaxStreamIdleTimeout,
		"set a Go duration longer than the app's streams and WebSockets stay quiet, such as \"10m\", or remove the annotation for the default (1h)")
	count := func(key string, most int64, fix string) (int32, bool) {
		v, ok := ann(key)
		if !ok {
			return 0, false
		}
		c, err := strconv.ParseInt(v, 10, 32)
		if err != nil || c < 0 || c > most {
			bad("annotation", n.Key(key), v, fmt.Sprintf("not a whole number from 0 to %d", most), fix)
			return 0, true
		}
		return int32(c), true
	}
	app.Concurrency, app.ConcurrencySet = count(AnnotationConcurrency, MaxConcurrency,
		"set how many requests one pod's app serves at once, such as \"1\" for a single-threaded app, or \"0\" for no limit")
	app.ConcurrencyQueue, app.ConcurrencyQueueSet = count(AnnotationConcurrencyQueue, MaxConcurrencyQueue,
		"set how many requests the sidecar queues beyond "+n.Key(AnnotationConcurrency)+", such as \"100\"")
	if app.ConcurrencyQueueSet && app.Concurrency == 0 {
		v, _ := ann(AnnotationConcurrencyQueue)
		bad("annotation", n.Key(AnnotationConcurrencyQueue), v, "a queue without a concurrency limit: the sidecar queues nothing when "+n.Key(AnnotationConcurrency)+" is unset or 0",
			"set "+n.Key(AnnotationConcurrency)+" above 0 too, or remove "+n.Key(AnnotationConcurrencyQueue))
	}
	if v, ok := ann(AnnotationFallback); ok {
		svc, port, reason := parseFallback(v)
		if reason == "" && svc == app.Service {
			reason = "the app's own Service (" + n.Key(AnnotationService) + "), which has no ready pod when the fallback is used"
		}
		if reason != "" {
			bad("annotation", n.Key(AnnotationFallback), v, reason,
				"name another Service of the namespace, as \"<service>\" or \"<service>:<port number>\", such as \"hello-static:80\"")
		} else {
			app.Fallback, app.FallbackPort = svc, port
		}
	}
	if v, ok := ann(AnnotationRouteLabels); ok {
		rl, probs := parseRouteLabels(v, n.Suffix()+"/")
		app.RouteLabels = rl
		for _, p := range probs {
			bad("annotation", n.Key(AnnotationRouteLabels), v, p, "list up to 16 labels as key=value separated by commas, e.g. \"team=payments,tier=gold\"")
		}
	}
	if v, ok := ann(AnnotationPlaceholder); ok {
		switch v {
		case "true", "false":
			app.Placeholder = v == "true"
		default:
			bad("annotation", n.Key(AnnotationPlaceholder), v, "not true or false",
				"set \"true\" to show browsers a waiting page while the app starts from zero")
		}
	}

	if spec.HostNetwork {
		bad("label", n.AppLabel(), app.Name, "the pod uses hostNetwork, so the sidecar's ports would collide on the node",
			"remove hostNetwork or remove the label "+n.AppLabel())
	}
	portAnn, hasPortAnn := ann(AnnotationPort)
	problems = append(problems, findPort(&app, spec, cfg, portAnn, hasPortAnn)...)

	if len(problems) > 0 {
		return App{}, &RefusalError{Problems: problems}
	}
	return app, nil
}

// parseFallback splits "<service>" or "<service>:<port number>"; reason is
// "" when v is one.
func parseFallback(v string) (svc string, port int32, reason string) {
	svc, p, hasPort := strings.Cut(v, ":")
	if errs := validation.IsDNS1035Label(svc); len(errs) > 0 {
		return "", 0, "not a Service name: " + strings.Join(errs, ", ")
	}
	if hasPort {
		n, err := strconv.ParseInt(p, 10, 32)
		if err != nil || n < 1 || n > 65535 {
			return "", 0, fmt.Sprintf("port %q is not a port number (1-65535)", p)
		}
		port = int32(n)
	}
	return svc, port, ""
}

func findPort(app *App, spec *corev1.PodSpec, cfg Config, portAnn string, hasPortAnn bool) []Problem {
	n := cfg.Names
	portKey := n.Key(AnnotationPort)
	var problems []Problem
	type found struct {
		container string
		port      corev1.ContainerPort
	}
	var all []found
	for _, c := range spec.Containers {
		for _, p := range c.Ports {
			all = append(all, found{c.Name, p})
		}
	}
	// Sidecar ports must be free in every container of the pod.
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for _, c := range cs {
			for _, p := range c.Ports {
				if p.ContainerPort == cfg.ListenPort || p.ContainerPort == cfg.AdminPort {
					problems = append(problems, Problem{Reason: fmt.Sprintf("container %q declares port %d, which the ebb sidecar listens on", c.Name, p.ContainerPort),
						Fix: fmt.Sprintf("move the container off ports %d and %d, or remove the label %s", cfg.ListenPort, cfg.AdminPort, n.AppLabel())})
				}
			}
		}
	}

	var match []found
	switch {
	case hasPortAnn:
		num, numErr := strconv.ParseInt(portAnn, 10, 32)
		isNum := numErr == nil
		if isNum && (num < 1 || num > 65535) {
			return append(problems, Problem{Kind: "annotation", Key: portKey, Value: portAnn, Reason: "port number out of range",
				Fix: "name the app's container port by its name or number (1-65535)"})
		}
		if !isNum {
			if errs := validation.IsValidPortName(portAnn); len(errs) > 0 {
				return append(problems, Problem{Kind: "annotation", Key: portKey, Value: portAnn, Reason: "neither a port number nor a port name: " + strings.Join(errs, ", "),
					Fix: "name the app's container port by its name or number"})
			}
		}
		for _, f := range all {
			if (isNum && int64(f.port.ContainerPort) == num) || (!isNum && f.port.Name == portAnn) {
				match = append(match, f)
			}
		}
		if len(match) == 0 {
			return append(problems, Problem{Kind: "annotation", Key: portKey, Value: portAnn, Reason: "no container of the pod declares this port",
				Fix: "add it to the app container's ports, or set the annotation to one of " + describePorts(spec)})
		}
		if len(match) > 1 {
			return append(problems, Problem{Kind: "annotation", Key: portKey, Value: portAnn, Reason: fmt.Sprintf("%d containers declare this port", len(match)),
				Fix: "give the app's port a name unique in the pod and set the annotation to it"})
		}
	case len(all) == 1:
		match = all
	case len(all) == 0:
		return append(problems, Problem{Kind: "annotation", Key: portKey, Reason: "the pod declares no container port and the annotation is not set",
			Fix: "declare the app's port in its container (ports: [{name: http, containerPort: 8080}]) or set " + portKey})
	default:
		return append(problems, Problem{Kind: "annotation", Key: portKey, Reason: fmt.Sprintf("the pod declares %d container ports (%s), so ebb cannot tell the app's", len(all), describePorts(spec)),
			Fix: "set " + portKey + " to the app's port name or number"})
	}
	f := match[0]
	if f.port.Protocol != "" && f.port.Protocol != corev1.ProtocolTCP {
		problems = append(problems, Problem{Kind: "annotation", Key: portKey, Value: portAnn, Reason: fmt.Sprintf("the app port %d is %s; the sidecar proxies TCP (HTTP) only", f.port.ContainerPort, f.port.Protocol),
			Fix: "point " + portKey + " at the app's TCP port"})
	}
	app.Container, app.Port, app.PortName = f.container, f.port.ContainerPort, f.port.Name
	return problems
}

func describePorts(spec *corev1.PodSpec) string {
	var s []string
	for _, c := range spec.Containers {
		for _, p := range c.Ports {
			if p.Name != "" {
				s = append(s, fmt.Sprintf("%s (%d in %s)", p.Name, p.ContainerPort, c.Name))
			} else {
				s = append(s, fmt.Sprintf("%d (in %s)", p.ContainerPort, c.Name))
			}
		}
	}
	if len(s) == 0 {
		return "(none declared)"
	}
	return strings.Join(s, ", ")
}

// parseHosts splits a comma-separated host list of an app in namespace. It
// returns the hosts kept (lowercase, de-duplicated) and one reason per bad
// entry.
func parseHosts(v, namespace string) ([]string, []string) {
	var hosts, probs []string
	seen := map[string]bool{}
	for _, h := range strings.Split(v, ",") {
		h = strings.TrimSpace(h)
		if h == "" {
			continue
		}
		if reason := checkHost(h, namespace); reason != "" {
			probs = append(probs, reason)
			continue
		}
		if !seen[h] {
			seen[h] = true
			hosts = append(hosts, h)
		}
	}
	if len(hosts) > MaxHosts {
		probs = append(probs, fmt.Sprintf("%d hosts, at most %d allowed", len(hosts), MaxHosts))
	}
	return hosts, probs
}

// checkHost is why an app of namespace may not list host h, or "". The
// activators' routing table skips the same hosts (package routing): a
// namespace's cluster names and its Services' ClusterIPs route only to its
// own apps.
func checkHost(h, namespace string) string {
	name := h
	if rest, ok := strings.CutPrefix(h, "*."); ok {
		name = rest
		if !strings.Contains(name, ".") {
			return fmt.Sprintf("wildcard %q covers a whole top-level domain", h)
		}
	}
	if strings.ContainsAny(name, "*:/") {
		return fmt.Sprintf("host %q: only a leading \"*.\" wildcard is allowed, without port or path", h)
	}
	if net.ParseIP(name) != nil || routing.NumericTLD(name) {
		return fmt.Sprintf("host %q is an IP address, which no app may list (the app's Service's ClusterIP is routed to it already)", h)
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return fmt.Sprintf("host %q is not a lowercase DNS name", h)
	}
	if !strings.Contains(name, ".") {
		return fmt.Sprintf("host %q is a single label, which is any namespace's Service name (the app's own Service's short name is routed to it already)", h)
	}
	if owner, ok := routing.ClusterDomainNamespace(name); ok && owner != namespace {
		if owner == "" {
			return fmt.Sprintf("host %q covers the cluster domain of every namespace", h)
		}
		return fmt.Sprintf("host %q is a cluster name of namespace %q, which routes only to that namespace's apps", h, owner)
	}
	return ""
}

func parsePaths(v string) ([]string, []string) {
	var paths, probs []string
	seen := map[string]bool{}
	for _, p := range strings.Split(v, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if !strings.HasPrefix(p, "/") || strings.ContainsAny(p, "?# \t") || len(p) > 1024 {
			probs = append(probs, fmt.Sprintf("path prefix %q must start with \"/\" and hold no query, fragment or space", p))
			continue
		}
		if !seen[p] {
			seen[p] = true
			paths = append(paths, p)
		}
	}
	if len(paths) > MaxPaths {
		probs = append(probs, fmt.Sprintf("%d path prefixes, at most %d allowed", len(paths), MaxPaths))
	}
	return paths, probs
}

// parseRouteLabels parses "k=v,k2=v2" into labels: valid label keys and
// values, each key once, none under ebb's own prefix (ebb sets those).
func parseRouteLabels(v, ownPrefix string) (map[string]string, []string) {
	out := map[string]string{}
	var probs []string
	for part := range strings.SplitSeq(v, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, val, ok := strings.Cut(part, "=")
		k, val = strings.TrimSpace(k), strings.TrimSpace(val)
		switch {
		case !ok:
			probs = append(probs, fmt.Sprintf("%q is not key=value", part))
		case len(validation.IsQualifiedName(k)) > 0:
			probs = append(probs, fmt.Sprintf("%q is not a label key: %s", k, strings.Join(validation.IsQualifiedName(k), ", ")))
		case strings.HasPrefix(k, ownPrefix):
			probs = append(probs, fmt.Sprintf("%q is under %s, which ebb sets itself", k, ownPrefix))
		case len(validation.IsValidLabelValue(val)) > 0:
			probs = append(probs, fmt.Sprintf("%q is not a label value: %s", val, strings.Join(validation.IsValidLabelValue(val), ", ")))
		default:
			if _, dup := out[k]; dup {
				probs = append(probs, fmt.Sprintf("%q is given twice", k))
			}
			out[k] = val
		}
	}
	if len(out) > MaxRouteLabels {
		probs = append(probs, fmt.Sprintf("%d labels, more than %d", len(out), MaxRouteLabels))
	}
	if len(out) == 0 {
		out = nil
	}
	return out, probs
}
