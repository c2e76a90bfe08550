package activator

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/kubeclient"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/ebb-dev/ebb/activator/control"
	"github.com/ebb-dev/ebb/activator/proxy"
	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/internal/logging"
	"github.com/ebb-dev/ebb/internal/options"
	"github.com/ebb-dev/ebb/internal/sidecarapi"
	"github.com/ebb-dev/ebb/internal/tracing"
	"github.com/ebb-dev/ebb/internal/workload"
)

// Defaults of Options (the request path's are proxy's).
const (
	DefaultResync   = time.Minute
	DefaultSelector = "app.kubernetes.io/name=ebb-activator"
	// DefaultDrainDelay covers kube-proxy's lag after a hand-off slice
	// drops a terminating activator: its minimum sync period (1 s) plus the
	// time it takes to apply its rules, up to about a second on a loaded
	// 2-core node (TestActivatorProcessCrash saw refusals up to 2 s after a
	// removal), with a second to spare.
	DefaultDrainDelay = 3 * time.Second
)

// Options configure one activator replica. Fill them with ParseOptions.
type Options struct {
	GroupSuffix      string
	Listen           string  // data port: held and forwarded requests
	AdminListen      string  // /healthz, /readyz, /metrics, /routing
	Kubeconfig       string  // empty: in-cluster configuration
	KubeAPIQPS       float64 // the activator's requests to the API server per second, all clients together
	KubeAPIBurst     int     // ...and at once above that
	QueueSize        int
	MaxHeld          int
	MaxHeldBytes     int
	ColdStartTimeout time.Duration
	// RequestTimeout, ResponseHeaderTimeout and StreamIdleTimeout bound
	// the requests an activator forwards to an app whose AppRoute sets
	// none of its own (proxy.AppConfig.Timeouts); zero: no bound.
	RequestTimeout, ResponseHeaderTimeout, StreamIdleTimeout time.Duration
	ProbeInterval                                            time.Duration
	Resync                                                   time.Duration
	// DrainTimeout is how long past its cold-start timeout a terminating
	// activator may take: it exits at the latest ColdStartTimeout +
	// DrainTimeout after SIGTERM. DrainDelay is how long it keeps accepting
	// once no hand-off slice lists it and no new connection came (kube-proxy's
	// sync lag). The drain is described in drain.go.
	DrainTimeout     time.Duration
	DrainDelay       time.Duration
	SidecarAdminPort int
	// ScalerAddresses are fixed scaler addresses (host:port) to push held
	// counts to; ScalerService ("namespace/name:port") discovers them from
	// the scaler Service's EndpointSlices instead.
	ScalerAddresses []string
	ScalerService   string
	// ScalerCAFile turns TLS on for the pushes: the scalers' certificate is
	// verified against it, under ScalerServerName (default the
	// ScalerService's DNS name); ScalerCertFile and ScalerKeyFile are the
	// client certificate a scaler with --tls-client-ca-file requires.
	ScalerCAFile, ScalerCertFile, ScalerKeyFile, ScalerServerName string
	// ActivatorSelector selects this instance's activator pods in
	// PodNamespace: the hand-off slices point at the ready ones and
	// propagation waits for each of them.
	ActivatorSelector string
	// ScaleTargets are the custom workload kinds routed besides Deployments
	// and StatefulSets, each <resource>.<group>: the webhook's list
	// (workload.ParseTargets), for the hand-off's "scaled to 0".
	ScaleTargets []string
	// HandoffPort is the activator port hand-off slices publish; default the
	// port of Listen.
	HandoffPort int
	// Pool is this replica's activator pool; PoolsConfigMap, in
	// PodNamespace, lists every pool of the instance (control.PoolsKey). Without
	// it the pool admits every route.
	Pool, PoolsConfigMap string
	LeaderElect          bool
	// RequestMetrics turns the request-duration histogram and status
	// counts of forwarded requests on (the default) or off.
	RequestMetrics bool
	// Tracing is --otlp-endpoint and --trace-sampling.
	Tracing tracing.Options
	Log     logging.Options
	// PodName, PodNamespace, PodIP come from the downward API.
	PodName, PodNamespace, PodIP string
}

// DefaultOptions are the options before flags and environment.
func DefaultOptions() Options {
	host, _ := os.Hostname()
	return Options{
		GroupSuffix:           groupsuffix.Default,
		KubeAPIQPS:            kubeclient.DefaultQPS,
		KubeAPIBurst:          kubeclient.DefaultBurst,
		Listen:                ":8080",
		AdminListen:           ":8081",
		QueueSize:             proxy.DefaultQueueSize,
		MaxHeld:               proxy.DefaultMaxHeld,
		MaxHeldBytes:          proxy.DefaultMaxHeldBytes,
		ColdStartTimeout:      proxy.DefaultColdStartTimeout,
		ResponseHeaderTimeout: proxy.DefaultResponseHeaderTimeout,
		StreamIdleTimeout:     proxy.DefaultStreamIdleTimeout,
		ProbeInterval:         proxy.DefaultProbeInterval,
		Resync:                DefaultResync,
		DrainTimeout:          30 * time.Second,
		DrainDelay:            DefaultDrainDelay,
		SidecarAdminPort:      sidecarapi.DefaultAdminPort,
		ActivatorSelector:     DefaultSelector,
		Pool:                  control.DefaultPool,
		LeaderElect:           true,
		RequestMetrics:        true,
		Tracing:               tracing.DefaultOptions(),
		Log:                   logging.DefaultOptions(),
		PodName:               host,
		PodNamespace:          "default",
	}
}

// ParseOptions fills Options from args (flag wins), then getenv, then
// DefaultOptions (package options says how), and returns every problem
// found at once, or an error wrapping flag.ErrHelp for -h.
func ParseOptions(args []string, getenv func(string) string) (Options, error) {
	return options.Parse("ebb-activator", DefaultOptions(), args, getenv)
}

// Complete sets the hand-off port to the port of --listen, and the scalers'
// TLS name to the --scaler-service's DNS name, unless given.
func (o *Options) Complete() {
	if o.ScalerCAFile != "" && o.ScalerServerName == "" {
		if ns, name, _, err := control.ParseServiceRef(o.ScalerService); err == nil {
			o.ScalerServerName = name + "." + ns + ".svc"
		}
	}
	if o.HandoffPort == 0 {
		if _, p, err := net.SplitHostPort(o.Listen); err == nil {
			o.HandoffPort, _ = strconv.Atoi(p)
		}
	}
}

// Bind adds the activator's flags to s.
func (o *Options) Bind(s *options.Set) {
	s.String(&o.GroupSuffix, "api-group-suffix", "group suffix of this ebb instance")
	s.String(&o.Listen, "listen", "address of the data port")
	s.String(&o.AdminListen, "admin-listen", "address of /healthz, /readyz, /metrics and /routing")
	s.Kubeconfig(&o.Kubeconfig)
	s.KubeAPI(&o.KubeAPIQPS, &o.KubeAPIBurst)
	s.Int(&o.QueueSize, "queue-size", "requests held per app unless its AppRoute says otherwise")
	s.Int(&o.MaxHeld, "max-held", "requests held across every app")
	s.Int(&o.MaxHeldBytes, "max-held-bytes", "bytes the held HTTP/1.x requests' heads may take across every app (past it: 503 with Retry-After)")
	s.Duration(&o.ColdStartTimeout, "cold-start-timeout", "how long a request is held unless its AppRoute says otherwise")
	s.Duration(&o.RequestTimeout, "request-timeout", "bound of a whole exchange forwarded to an app, unless its AppRoute says otherwise: 504 before the response head, the connection closed after it; 0s: none")
	s.Duration(&o.ResponseHeaderTimeout, "response-header-timeout", "how long a forwarded request waits for the app's response head, unless its AppRoute says otherwise (then 504); 0s: as long as the client stays")
	s.Duration(&o.StreamIdleTimeout, "stream-idle-timeout", "a WebSocket or streamed response forwarded with no byte either way for this long is closed, both sides, unless its AppRoute says otherwise; 0s: never")
	s.Duration(&o.ProbeInterval, "probe-interval", "period of /ready probes of not-ready sidecars while requests are held")
	s.Duration(&o.Resync, "resync", "period of the full re-list of AppRoutes; not ready after 3 failed in a row")
	s.Duration(&o.DrainTimeout, "drain-timeout", "after SIGTERM, exit at the latest --cold-start-timeout plus this (requests still held then get 503 with Retry-After)")
	s.Duration(&o.DrainDelay, "drain-delay", "after SIGTERM, keep accepting until no hand-off slice has listed this replica and no new connection has come for this long")
	s.Int(&o.SidecarAdminPort, "sidecar-admin-port", "admin port of the app pods' sidecars, probed for /ready")
	s.List(&o.ScalerAddresses, "scaler-addresses", "comma-separated scaler host:port list to push held counts to")
	s.String(&o.ScalerService, "scaler-service", "namespace/name:port of the scaler Service, whose ready endpoints get the pushes")
	s.String(&o.ScalerCAFile, "scaler-ca-file", "push to the scalers over TLS, verifying them against this PEM CA")
	s.String(&o.ScalerCertFile, "scaler-cert-file", "PEM client certificate presented to the scalers (reloaded when it changes)")
	s.String(&o.ScalerKeyFile, "scaler-key-file", "PEM key of --scaler-cert-file")
	s.String(&o.ScalerServerName, "scaler-server-name", "name the scalers' certificate must carry; default <name>.<namespace>.svc of --scaler-service")
	s.String(&o.ActivatorSelector, "activator-selector", "label selector of this instance's activator pods in the pod's namespace")
	s.List(&o.ScaleTargets, "scale-targets", "comma-separated custom workload kinds routed besides Deployments and StatefulSets, each <resource>.<group>, as the webhook's --scale-targets")
	s.Int(&o.HandoffPort, "handoff-port", "activator port in hand-off EndpointSlices (default: the port of --listen)")
	s.String(&o.Pool, "pool", "activator pool of this replica: it publishes the hand-off slices of the routes the pool admits")
	s.String(&o.PoolsConfigMap, "pools-configmap", "ConfigMap (in the pod's namespace) listing every activator pool in "+control.PoolsKey+"; unset: this pool admits every route")
	s.Bool(&o.LeaderElect, "leader-elect", "elect one replica to write hand-off slices and Propagated conditions")
	s.Bool(&o.RequestMetrics, "request-metrics", "export the request-duration histogram and status counts of forwarded requests")
	o.Tracing.Bind(s)
	o.Log.Bind(s)
	s.Pod(&o.PodName, &o.PodNamespace, &o.PodIP)
}

// MinMaxHeldBytes is the smallest --max-held-bytes: 16 heads of the data
// port's largest (64 KiB).
const MinMaxHeldBytes = 1 << 20

// MaxColdStartTimeout is the longest --cold-start-timeout: the one ceiling
// of cold-start timeouts, v1alpha1.MaxColdStartTimeout.
const MaxColdStartTimeout = routingv1alpha1.MaxColdStartTimeout

// Validate returns every problem of o at once.
func (o Options) Validate() error {
	var problems []error
	bad := func(format string, args ...any) { problems = append(problems, fmt.Errorf(format, args...)) }
	if _, err := groupsuffix.New(o.GroupSuffix); err != nil {
		bad("--api-group-suffix: %w", err)
	}
	for name, addr := range map[string]string{"--listen": o.Listen, "--admin-listen": o.AdminListen} {
		if err := options.CheckListen(addr); err != nil {
			bad("%s %q: %w", name, addr, err)
		}
	}
	if o.QueueSize < 1 || o.QueueSize > 1_000_000 {
		bad("--queue-size %d: want 1 to 1000000", o.QueueSize)
	}
	if o.MaxHeld < o.QueueSize {
		bad("--max-held %d: must be at least --queue-size (%d)", o.MaxHeld, o.QueueSize)
	}
	if o.MaxHeldBytes < MinMaxHeldBytes {
		bad("--max-held-bytes %d: want at least %d (1 MiB)", o.MaxHeldBytes, MinMaxHeldBytes)
	}
	if o.ColdStartTimeout < time.Millisecond || o.ColdStartTimeout > MaxColdStartTimeout {
		bad("--cold-start-timeout %s: want 1ms to %s", o.ColdStartTimeout, MaxColdStartTimeout)
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"--request-timeout", o.RequestTimeout}, {"--response-header-timeout", o.ResponseHeaderTimeout}, {"--stream-idle-timeout", o.StreamIdleTimeout}} {
		if d.v < 0 {
			bad("%s %s: want 0s (none) or more", d.flag, d.v)
		}
	}
	if o.ProbeInterval < time.Millisecond || o.ProbeInterval > 10*time.Second {
		bad("--probe-interval %s: want [1ms, 10s]", o.ProbeInterval)
	}
	if o.Resync < time.Second {
		bad("--resync %s: want at least 1s", o.Resync)
	}
	if o.DrainTimeout < 0 || o.DrainTimeout > time.Hour {
		bad("--drain-timeout %s: want 0s to 1h", o.DrainTimeout)
	}
	if o.DrainDelay < 0 || o.DrainDelay > time.Minute {
		bad("--drain-delay %s: want 0s to 1m", o.DrainDelay)
	}
	if o.SidecarAdminPort < 1 || o.SidecarAdminPort > 65535 {
		bad("--sidecar-admin-port %d: want 1 to 65535", o.SidecarAdminPort)
	}
	if o.HandoffPort < 1 || o.HandoffPort > 65535 {
		bad("--handoff-port %d: want 1 to 65535 (or a --listen with a port)", o.HandoffPort)
	}
	for _, a := range o.ScalerAddresses {
		if _, _, err := net.SplitHostPort(a); err != nil {
			bad("--scaler-addresses %q: %w", a, err)
		}
	}
	if o.ScalerService != "" {
		if _, _, _, err := control.ParseServiceRef(o.ScalerService); err != nil {
			bad("--scaler-service: %w", err)
		}
		if len(o.ScalerAddresses) > 0 {
			bad("--scaler-service and --scaler-addresses: set one, not both")
		}
	}
	if (o.ScalerCertFile == "") != (o.ScalerKeyFile == "") {
		bad("--scaler-cert-file and --scaler-key-file: set both or neither")
	}
	if o.ScalerCertFile != "" && o.ScalerCAFile == "" {
		bad("--scaler-cert-file needs --scaler-ca-file: a client certificate is only sent over TLS")
	}
	if o.ScalerCAFile != "" && o.ScalerServerName == "" && o.ScalerService == "" {
		bad("--scaler-ca-file needs --scaler-server-name (or --scaler-service, whose DNS name is the default)")
	}
	for _, f := range [][2]string{{"--scaler-ca-file", o.ScalerCAFile}, {"--scaler-cert-file", o.ScalerCertFile}, {"--scaler-key-file", o.ScalerKeyFile}} {
		if f[1] != "" {
			if _, err := os.Stat(f[1]); err != nil {
				bad("%s: %w", f[0], err)
			}
		}
	}
	if _, err := workload.ParseTargets(strings.Join(o.ScaleTargets, ",")); err != nil {
		bad("--scale-targets: %v", err)
	}
	if _, err := labels.Parse(o.ActivatorSelector); err != nil || o.ActivatorSelector == "" {
		bad("--activator-selector %q: not a label selector: %v", o.ActivatorSelector, err)
	}
	if errs := validation.IsDNS1123Label(o.Pool); len(errs) > 0 {
		bad("--pool %q: %s", o.Pool, strings.Join(errs, ", "))
	}
	if o.PoolsConfigMap != "" {
		if errs := validation.IsDNS1123Subdomain(o.PoolsConfigMap); len(errs) > 0 {
			bad("--pools-configmap %q: %s", o.PoolsConfigMap, strings.Join(errs, ", "))
		}
	}
	if o.PodName == "" || o.PodNamespace == "" {
		bad("POD_NAME and POD_NAMESPACE: both required (downward API)")
	}
	problems = append(problems, options.CheckKubeAPI(o.KubeAPIQPS, o.KubeAPIBurst), o.Tracing.Validate(), o.Log.Validate())
	return errors.Join(problems...)
}
