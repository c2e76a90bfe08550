package inject

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/internal/options"
	"github.com/ebb-dev/ebb/internal/readiness"
	"github.com/ebb-dev/ebb/internal/sidecarapi"
	"github.com/ebb-dev/ebb/internal/tracing"
)

// Names the sidecar carries; the scaler finds it by ContainerName and
// AdminPortName.
const (
	ContainerName = "ebb-sidecar"
	AdminPortName = "ebb-admin"
	// RenamedAppPortName replaces the app port's name in the app container,
	// so a Service's named targetPort lands on the sidecar instead.
	RenamedAppPortName = "ebb-app"
	// UnnamedDataPortName names the sidecar's data port when the app port
	// had no name.
	UnnamedDataPortName = "http"
	// SidecarUID is the user the sidecar runs as (distroless "nonroot").
	SidecarUID = 65532
)

// Environment variables the sidecar reads.
const (
	EnvListen       = "EBB_LISTEN"
	EnvUpstream     = "EBB_UPSTREAM"
	EnvAdminListen  = "EBB_ADMIN_LISTEN"
	EnvDrainTimeout = "EBB_DRAIN_TIMEOUT"
	// EnvInstance names the instance (its group suffix) on the sidecar's
	// metrics.
	EnvInstance = "EBB_INSTANCE"
	// EnvResponseHeaderTimeout is set only when the pod's annotation is.
	EnvResponseHeaderTimeout = "EBB_RESPONSE_HEADER_TIMEOUT"
	// EnvRequestTimeout, EnvStreamIdleTimeout, EnvConcurrency and
	// EnvConcurrencyQueue are set only when the pod's annotations are.
	EnvRequestTimeout    = "EBB_REQUEST_TIMEOUT"
	EnvStreamIdleTimeout = "EBB_STREAM_IDLE_TIMEOUT"
	EnvConcurrency       = "EBB_CONCURRENCY"
	EnvConcurrencyQueue  = "EBB_CONCURRENCY_QUEUE"
	// EnvStaticResponses carries the app's RoutePolicy's static responses
	// (Policy.StaticResponses), set only when it has some.
	EnvStaticResponses = "EBB_STATIC_RESPONSES"
	// EnvAppReadiness carries the app container's readiness probe to the
	// sidecar (readiness.Check as JSON), set only when it has one the
	// sidecar can run.
	EnvAppReadiness = "EBB_APP_READINESS"
	EnvPodName      = "POD_NAME"
	EnvPodNamespace = "POD_NAMESPACE"
	EnvPodIP        = "POD_IP"
)

// Config is what the webhook was started with: the instance's names and how
// the sidecar looks.
type Config struct {
	Names           groupsuffix.Names
	Image           string
	ImagePullPolicy corev1.PullPolicy
	Resources       corev1.ResourceRequirements
	// ListenPort and AdminPort are the sidecar's data and admin ports.
	ListenPort, AdminPort int32
	// DrainTimeout is EBB_DRAIN_TIMEOUT unless the pod's annotation sets it.
	DrainTimeout time.Duration
	// RequestMetrics false turns the sidecar's request metrics off
	// (EBB_REQUEST_METRICS).
	RequestMetrics bool
	// Tracing is the sidecar's EBB_OTLP_ENDPOINT and EBB_TRACE_SAMPLING.
	Tracing tracing.Options
}

// DefaultImageRepository is the sidecar image without tag.
const DefaultImageRepository = "ghcr.io/ebb-dev/ebb-sidecar"

// DefaultConfig is the sidecar of an instance named by names, image tag
// version.
func DefaultConfig(names groupsuffix.Names, version string) Config {
	return Config{
		Names:           names,
		Image:           DefaultImageRepository + ":" + version,
		ImagePullPolicy: corev1.PullIfNotPresent,
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{
				corev1.ResourceCPU:    resource.MustParse("25m"),
				corev1.ResourceMemory: resource.MustParse("32Mi"),
			},
			Limits: corev1.ResourceList{
				corev1.ResourceMemory: resource.MustParse("128Mi"),
			},
		},
		ListenPort:     sidecarapi.DefaultListenPort,
		AdminPort:      sidecarapi.DefaultAdminPort,
		DrainTimeout:   20 * time.Second,
		RequestMetrics: true,
		Tracing:        tracing.DefaultOptions(),
	}
}

// Policy is what the app's RoutePolicy gives the sidecar of a pod admitted
// while the policy is the app's. A running pod keeps what it started with.
type Policy struct {
	// StaticResponses are the policy's static responses as the sidecar reads
	// them: a JSON array of staticanswer.Rule, checked by
	// staticanswer.Compile; "" for none.
	StaticResponses string
}

// Inject returns a copy of pod with the ebb sidecar added, given what
// the app's policy says (pol), the warnings to show the user, or a
// *RefusalError naming what is wrong. pod is not modified. A pod that already has a container named ContainerName is
// returned unchanged: silently when this instance injected it (so injecting
// twice changes nothing), with a warning otherwise.
func Inject(pod *corev1.Pod, cfg Config, pol Policy) (*corev1.Pod, []string, error) {
	out := pod.DeepCopy()
	if HasSidecar(&out.Spec) {
		if _, ours := out.Annotations[cfg.Names.SidecarAnnotation()]; ours {
			return out, nil, nil
		}
		return out, []string{fmt.Sprintf("pod already has a container named %q (from another ebb instance?); %s leaves it alone and registers no route", ContainerName, cfg.Names.Suffix())}, nil
	}
	app, err := ParseApp(out.Namespace, &out.ObjectMeta, &out.Spec, cfg)
	if err != nil {
		return nil, nil, err
	}
	warnings := UnknownKeys(&out.ObjectMeta, cfg.Names)

	dataPortName := app.PortName
	if dataPortName == "" {
		dataPortName = UnnamedDataPortName
		if portNameUsed(&out.Spec, dataPortName) {
			dataPortName = "ebb-http"
		}
		warnings = append(warnings, fmt.Sprintf("the app port %d has no name: a Service reaches the sidecar only with targetPort: %s (a targetPort by number bypasses it and ebb cannot count requests)", app.Port, dataPortName))
	}

	for i := range out.Spec.InitContainers {
		rewriteProbes(&out.Spec.InitContainers[i], "", cfg.ListenPort, app.Port)
	}
	for i := range out.Spec.Containers {
		c := &out.Spec.Containers[i]
		if c.Name != app.Container {
			rewriteProbes(c, "", cfg.ListenPort, app.Port)
			continue
		}
		if app.PortName != "" {
			for j := range c.Ports {
				if c.Ports[j].Name == app.PortName {
					c.Ports[j].Name = RenamedAppPortName
				}
			}
		}
		rewriteProbes(c, app.PortName, cfg.ListenPort, app.Port)
		if c.Lifecycle == nil || c.Lifecycle.PreStop == nil {
			if c.Lifecycle == nil {
				c.Lifecycle = &corev1.Lifecycle{}
			}
			c.Lifecycle.PreStop = waitForDrain(cfg.AdminPort)
		} else {
			warnings = append(warnings, fmt.Sprintf("container %q has its own preStop hook, so ebb does not add its own (GET %s on port %d, which keeps the pod serving until traffic has moved away): requests may fail while the app scales down unless your hook calls it or waits a few seconds", c.Name, sidecarapi.WaitForDrainPath, cfg.AdminPort))
		}
	}

	drain := cfg.DrainTimeout
	if app.DrainTimeoutSet {
		drain = app.DrainTimeout
	}
	if g := out.Spec.TerminationGracePeriodSeconds; g != nil && time.Duration(*g)*time.Second <= drain {
		warnings = append(warnings, fmt.Sprintf("terminationGracePeriodSeconds (%ds) is not longer than the sidecar's drain timeout (%s): requests may be cut off on shutdown", *g, drain))
	}

	sc := sidecar(cfg, dataPortName, app.Port, drain)
	for i := range out.Spec.Containers {
		c := &out.Spec.Containers[i]
		if c.Name != app.Container || c.ReadinessProbe == nil {
			continue
		}
		check, warning := appReadiness(c)
		if warning != "" {
			warnings = append(warnings, warning)
		}
		if check != nil {
			sc.Env = append(sc.Env, corev1.EnvVar{Name: EnvAppReadiness, Value: check.String()})
		}
	}
	if app.ResponseHeaderTimeout > 0 {
		sc.Env = append(sc.Env, corev1.EnvVar{Name: EnvResponseHeaderTimeout, Value: app.ResponseHeaderTimeout.String()})
	}
	if app.RequestTimeout > 0 {
		sc.Env = append(sc.Env, corev1.EnvVar{Name: EnvRequestTimeout, Value: app.RequestTimeout.String()})
	}
	if app.StreamIdleTimeout > 0 {
		sc.Env = append(sc.Env, corev1.EnvVar{Name: EnvStreamIdleTimeout, Value: app.StreamIdleTimeout.String()})
	}
	if app.ConcurrencySet {
		sc.Env = append(sc.Env, corev1.EnvVar{Name: EnvConcurrency, Value: strconv.Itoa(int(app.Concurrency))})
	}
	if app.ConcurrencyQueueSet {
		sc.Env = append(sc.Env, corev1.EnvVar{Name: EnvConcurrencyQueue, Value: strconv.Itoa(int(app.ConcurrencyQueue))})
	}
	if pol.StaticResponses != "" {
		sc.Env = append(sc.Env, corev1.EnvVar{Name: EnvStaticResponses, Value: pol.StaticResponses})
	}
	escapeEnv(sc.Env)
	out.Spec.InitContainers = append(out.Spec.InitContainers, sc)
	if out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	out.Annotations[cfg.Names.SidecarAnnotation()] = cfg.Image
	return out, warnings, nil
}

// escapeEnv writes every $ of the env values as $$: the kubelet expands
// $(NAME) to another variable's value and $$ to $ in every env value, and
// these are literal (a policy's static responses, the app's readiness
// probe: user input), to reach the sidecar as written.
func escapeEnv(env []corev1.EnvVar) {
	for i := range env {
		env[i].Value = strings.ReplaceAll(env[i].Value, "$", "$$")
	}
}

// HasSidecar reports whether pod spec holds a container named ContainerName,
// whoever injected it.
func HasSidecar(spec *corev1.PodSpec) bool {
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for _, c := range cs {
			if c.Name == ContainerName {
				return true
			}
		}
	}
	return false
}

func portNameUsed(spec *corev1.PodSpec, name string) bool {
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for _, c := range cs {
			for _, p := range c.Ports {
				if p.Name == name {
					return true
				}
			}
		}
	}
	return false
}

// appReadiness turns the app container's readiness probe (its app port
// already rewritten to a number) into the check the sidecar runs before it
// calls the pod ready for held requests. An exec or gRPC probe cannot be
// run by the sidecar: it gets nil and a warning saying what that means.
func appReadiness(c *corev1.Container) (*readiness.Check, string) {
	p := c.ReadinessProbe
	check := &readiness.Check{
		TimeoutSeconds: p.TimeoutSeconds, PeriodSeconds: p.PeriodSeconds,
		SuccessThreshold: p.SuccessThreshold, FailureThreshold: p.FailureThreshold,
	}
	port := func(v intstr.IntOrString) (int32, bool) {
		if v.Type == intstr.Int {
			return v.IntVal, v.IntVal > 0 && v.IntVal < 65536
		}
		for _, cp := range c.Ports {
			if cp.Name == v.StrVal {
				return cp.ContainerPort, true
			}
		}
		return 0, false
	}
	cannot := func(kind string) (*readiness.Check, string) {
		return nil, fmt.Sprintf("container %q has %s readiness probe, which ebb's sidecar cannot run: a request held while the app is at zero is released as soon as the app's port accepts connections, possibly before this probe passes; an httpGet or tcpSocket readiness probe is honoured", c.Name, kind)
	}
	switch h := p.ProbeHandler; {
	case h.HTTPGet != nil:
		n, ok := port(h.HTTPGet.Port)
		if !ok {
			return cannot("an httpGet (its port " + h.HTTPGet.Port.String() + " is not declared)")
		}
		check.HTTP = &readiness.HTTPGet{Scheme: string(h.HTTPGet.Scheme), Host: h.HTTPGet.Host, Port: n, Path: h.HTTPGet.Path}
		if check.HTTP.Path == "" {
			check.HTTP.Path = "/"
		}
		for _, hd := range h.HTTPGet.HTTPHeaders {
			check.HTTP.Headers = append(check.HTTP.Headers, readiness.Header{Name: hd.Name, Value: hd.Value})
		}
	case h.TCPSocket != nil:
		n, ok := port(h.TCPSocket.Port)
		if !ok {
			return cannot("a tcpSocket (its port " + h.TCPSocket.Port.String() + " is not declared)")
		}
		check.TCP = &readiness.TCPSocket{Host: h.TCPSocket.Host, Port: n}
	case h.Exec != nil:
		return cannot("an exec")
	case h.GRPC != nil:
		return cannot("a gRPC")
	default:
		return nil, ""
	}
	if err := check.Validate(); err != nil {
		return cannot("a malformed (" + err.Error() + ")")
	}
	return check, ""
}

// rewriteProbes points every kubelet probe and lifecycle hook of c that
// would reach the sidecar's data port at the app's own port number instead,
// so that it reaches the app directly and is neither counted nor able to
// wake the app (the sidecar counts every request it gets, whoever sends
// it): an httpGet or tcpSocket port named name (the app port's name, which
// the sidecar takes over; "" for none, as in containers other than the
// app's, where the kubelet resolves names among the container's own
// ports), and an httpGet, tcpSocket or grpc port numbered dataPort (the
// sidecar's) on the pod's own address.
func rewriteProbes(c *corev1.Container, name string, dataPort, appPort int32) {
	fix := func(p *intstr.IntOrString, host string) {
		if p.Type == intstr.String && name != "" && p.StrVal == name ||
			p.Type == intstr.Int && p.IntVal == dataPort && host == "" {
			*p = intstr.FromInt32(appPort)
		}
	}
	handler := func(get *corev1.HTTPGetAction, tcp *corev1.TCPSocketAction, grpc *corev1.GRPCAction) {
		if get != nil {
			fix(&get.Port, get.Host)
		}
		if tcp != nil {
			fix(&tcp.Port, tcp.Host)
		}
		if grpc != nil && grpc.Port == dataPort {
			grpc.Port = appPort
		}
	}
	for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
		if p != nil {
			handler(p.HTTPGet, p.TCPSocket, p.GRPC)
		}
	}
	if c.Lifecycle != nil {
		for _, h := range []*corev1.LifecycleHandler{c.Lifecycle.PostStart, c.Lifecycle.PreStop} {
			if h != nil {
				handler(h.HTTPGet, h.TCPSocket, nil)
			}
		}
	}
}

// waitForDrain is the preStop hook of the app container: the kubelet stops
// the app only once the sidecar has seen no request for its drain delay,
// that is once every Service consumer has moved to other endpoints.
func waitForDrain(adminPort int32) *corev1.LifecycleHandler {
	return &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{
		Path: sidecarapi.WaitForDrainPath, Port: intstr.FromInt32(adminPort), Scheme: corev1.URISchemeHTTP,
	}}
}

func sidecar(cfg Config, dataPortName string, appPort int32, drain time.Duration) corev1.Container {
	always := corev1.ContainerRestartPolicyAlways
	fieldEnv := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: path}}}
	}
	var extra []corev1.EnvVar
	if !cfg.RequestMetrics {
		extra = append(extra, corev1.EnvVar{Name: options.EnvName("request-metrics"), Value: "false"})
	}
	if cfg.Tracing.Endpoint != "" {
		extra = append(extra,
			corev1.EnvVar{Name: options.EnvName("otlp-endpoint"), Value: cfg.Tracing.Endpoint},
			corev1.EnvVar{Name: options.EnvName("trace-sampling"), Value: strconv.FormatFloat(cfg.Tracing.Sampling, 'g', -1, 64)})
	}
	return corev1.Container{
		Name:            ContainerName,
		Image:           cfg.Image,
		ImagePullPolicy: cfg.ImagePullPolicy,
		RestartPolicy:   &always,
		Ports: []corev1.ContainerPort{
			{Name: dataPortName, ContainerPort: cfg.ListenPort, Protocol: corev1.ProtocolTCP},
			{Name: AdminPortName, ContainerPort: cfg.AdminPort, Protocol: corev1.ProtocolTCP},
		},
		Env: append([]corev1.EnvVar{
			{Name: EnvListen, Value: ":" + strconv.Itoa(int(cfg.ListenPort))},
			{Name: EnvUpstream, Value: "127.0.0.1:" + strconv.Itoa(int(appPort))},
			{Name: EnvAdminListen, Value: ":" + strconv.Itoa(int(cfg.AdminPort))},
			{Name: EnvDrainTimeout, Value: drain.String()},
			fieldEnv(EnvPodName, "metadata.name"),
			fieldEnv(EnvPodNamespace, "metadata.namespace"),
			fieldEnv(EnvPodIP, "status.podIP"),
			{Name: EnvInstance, Value: cfg.Names.Suffix()},
		}, extra...),
		Resources: *cfg.Resources.DeepCopy(),
		ReadinessProbe: &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: sidecarapi.ReadyPath, Port: intstr.FromString(AdminPortName), Scheme: corev1.URISchemeHTTP,
			}},
			PeriodSeconds:    1,
			TimeoutSeconds:   1,
			SuccessThreshold: 1,
			FailureThreshold: 3,
		},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		SecurityContext:          RestrictedSecurityContext(),
	}
}

// RestrictedSecurityContext passes Pod Security "restricted" on its own,
// whatever the pod-level context says.
func RestrictedSecurityContext() *corev1.SecurityContext {
	t, f := true, false
	uid := int64(SidecarUID)
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: &f,
		Privileged:               &f,
		ReadOnlyRootFilesystem:   &t,
		RunAsNonRoot:             &t,
		RunAsUser:                &uid,
		RunAsGroup:               &uid,
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}
