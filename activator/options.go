package activator

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/internal/stats"
)

// Defaults of Options and DataPlaneOptions.
const (
	DefaultQueueSize        = 1000
	DefaultMaxHeld          = 20000
	DefaultColdStartTimeout = 2 * time.Minute
	DefaultProbeInterval    = 10 * time.Millisecond
	DefaultResync           = time.Minute
	DefaultSelector         = "app.kubernetes.io/name=ebb-activator"
)

// Options configure one activator replica. Fill them with ParseOptions.
type Options struct {
	APIGroupSuffix   string
	Listen           string // data port: held and forwarded requests
	AdminListen      string // /healthz, /readyz, /metrics, /routing
	Kubeconfig       string // empty: in-cluster configuration
	QueueSize        int
	MaxHeld          int
	ColdStartTimeout time.Duration
	ProbeInterval    time.Duration
	Resync           time.Duration
	DrainTimeout     time.Duration
	SidecarAdminPort int
	// ScalerAddresses are fixed scaler addresses (host:port) to push held
	// counts to; ScalerService ("namespace/name:port") discovers them from
	// the scaler Service's EndpointSlices instead.
	ScalerAddresses []string
	ScalerService   string
	// ActivatorSelector selects this instance's activator pods in
	// PodNamespace: the hand-off slices point at the ready ones and
	// propagation waits for each of them.
	ActivatorSelector string
	// HandoffPort is the activator port hand-off slices publish; default the
	// port of Listen.
	HandoffPort    int
	LeaderElection bool
	LogLevel       string
	LogFormat      string
	// PodName, PodNamespace, PodIP come from the downward API.
	PodName, PodNamespace, PodIP string
}

// DefaultOptions are the options before flags and environment.
func DefaultOptions() Options {
	host, _ := os.Hostname()
	return Options{
		APIGroupSuffix:    groupsuffix.Default,
		Listen:            ":8080",
		AdminListen:       ":8081",
		QueueSize:         DefaultQueueSize,
		MaxHeld:           DefaultMaxHeld,
		ColdStartTimeout:  DefaultColdStartTimeout,
		ProbeInterval:     DefaultProbeInterval,
		Resync:            DefaultResync,
		DrainTimeout:      30 * time.Second,
		SidecarAdminPort:  stats.DefaultAdminPort,
		ActivatorSelector: DefaultSelector,
		LeaderElection:    true,
		LogLevel:          "info",
		LogFormat:         "json",
		PodName:           host,
		PodNamespace:      "default",
	}
}

// ParseOptions fills Options from args (flag wins), then getenv, then
// DefaultOptions, and returns every problem found at once.
func ParseOptions(args []string, getenv func(string) string) (Options, error) {
	o, _, err := parseOptions(args, getenv)
	return o, err
}

// Usage writes the flags and their environment variables to w.
func Usage(w io.Writer) {
	_, fs, _ := parseOptions(nil, func(string) string { return "" })
	fmt.Fprintln(w, "Usage of ebb-activator:")
	fs.SetOutput(w)
	fs.PrintDefaults()
}

func parseOptions(args []string, getenv func(string) string) (Options, *flag.FlagSet, error) {
	o := DefaultOptions()
	var problems []error
	fs := flag.NewFlagSet("ebb-activator", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	str := func(p *string, name, env, usage string) {
		if v := getenv(env); v != "" {
			*p = v
		}
		fs.StringVar(p, name, *p, usage+" (env "+env+")")
	}
	dur := func(p *time.Duration, name, env, usage string) {
		if v := getenv(env); v != "" {
			if d, err := time.ParseDuration(v); err != nil {
				problems = append(problems, fmt.Errorf("%s=%q: not a duration", env, v))
			} else {
				*p = d
			}
		}
		fs.DurationVar(p, name, *p, usage+" (env "+env+")")
	}
	integer := func(p *int, name, env, usage string) {
		if v := getenv(env); v != "" {
			if n, err := strconv.Atoi(v); err != nil {
				problems = append(problems, fmt.Errorf("%s=%q: not an integer", env, v))
			} else {
				*p = n
			}
		}
		fs.IntVar(p, name, *p, usage+" (env "+env+")")
	}
	boolean := func(p *bool, name, env, usage string) {
		if v := getenv(env); v != "" {
			if b, err := strconv.ParseBool(v); err != nil {
				problems = append(problems, fmt.Errorf("%s=%q: not a boolean", env, v))
			} else {
				*p = b
			}
		}
		fs.BoolVar(p, name, *p, usage+" (env "+env+")")
	}
	var scalers string
	str(&o.APIGroupSuffix, "api-group-suffix", "EBB_API_GROUP_SUFFIX", "group suffix of this ebb instance")
	str(&o.Listen, "listen", "EBB_LISTEN", "address of the data port")
	str(&o.AdminListen, "admin-listen", "EBB_ADMIN_LISTEN", "address of /healthz, /readyz, /metrics and /routing")
	str(&o.Kubeconfig, "kubeconfig", "KUBECONFIG", "kubeconfig path; empty means in-cluster")
	integer(&o.QueueSize, "queue-size", "EBB_QUEUE_SIZE", "requests held per app unless its AppRoute says otherwise")
	integer(&o.MaxHeld, "max-held", "EBB_MAX_HELD", "requests held across every app")
	dur(&o.ColdStartTimeout, "cold-start-timeout", "EBB_COLD_START_TIMEOUT", "how long a request is held unless its AppRoute says otherwise")
	dur(&o.ProbeInterval, "probe-interval", "EBB_PROBE_INTERVAL", "period of /ready probes of not-ready sidecars while requests are held")
	dur(&o.Resync, "resync", "EBB_RESYNC", "period of the full re-list of AppRoutes; not ready after 3 failed in a row")
	dur(&o.DrainTimeout, "drain-timeout", "EBB_DRAIN_TIMEOUT", "longest drain after SIGTERM")
	integer(&o.SidecarAdminPort, "sidecar-admin-port", "EBB_SIDECAR_ADMIN_PORT", "admin port of the app pods' sidecars, probed for /ready")
	str(&scalers, "scaler-addresses", "EBB_SCALER_ADDRESSES", "comma-separated scaler host:port list to push held counts to")
	str(&o.ScalerService, "scaler-service", "EBB_SCALER_SERVICE", "namespace/name:port of the scaler Service, whose ready endpoints get the pushes")
	str(&o.ActivatorSelector, "activator-selector", "EBB_ACTIVATOR_SELECTOR", "label selector of this instance's activator pods in the pod's namespace")
	integer(&o.HandoffPort, "handoff-port", "EBB_HANDOFF_PORT", "activator port in hand-off EndpointSlices (default: the port of --listen)")
	boolean(&o.LeaderElection, "leader-election", "EBB_LEADER_ELECTION", "elect one replica to write hand-off slices and Propagated conditions")
	str(&o.LogLevel, "log-level", "EBB_LOG_LEVEL", "debug, info, warn or error")
	str(&o.LogFormat, "log-format", "EBB_LOG_FORMAT", "json or text")
	o.PodName = cmpOr(getenv("POD_NAME"), o.PodName)
	o.PodNamespace = cmpOr(getenv("POD_NAMESPACE"), o.PodNamespace)
	o.PodIP = getenv("POD_IP")
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return o, fs, err
	} else if err != nil {
		problems = append(problems, err)
	} else if fs.NArg() > 0 {
		problems = append(problems, fmt.Errorf("unexpected arguments: %q", fs.Args()))
	}
	for _, s := range strings.Split(scalers, ",") {
		if s = strings.TrimSpace(s); s != "" {
			o.ScalerAddresses = append(o.ScalerAddresses, s)
		}
	}
	if o.HandoffPort == 0 {
		if _, p, err := net.SplitHostPort(o.Listen); err == nil {
			o.HandoffPort, _ = strconv.Atoi(p)
		}
	}
	if err := o.Validate(); err != nil {
		problems = append(problems, err)
	}
	return o, fs, errors.Join(problems...)
}

// Validate returns every problem of o at once.
func (o Options) Validate() error {
	var problems []error
	bad := func(format string, args ...any) { problems = append(problems, fmt.Errorf(format, args...)) }
	if _, err := groupsuffix.New(o.APIGroupSuffix); err != nil {
		bad("--api-group-suffix: %w", err)
	}
	for name, addr := range map[string]string{"--listen": o.Listen, "--admin-listen": o.AdminListen} {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			bad("%s %q: %w", name, addr, err)
		}
	}
	if o.QueueSize < 1 || o.QueueSize > 1_000_000 {
		bad("--queue-size %d: want 1 to 1000000", o.QueueSize)
	}
	if o.MaxHeld < o.QueueSize {
		bad("--max-held %d: must be at least --queue-size (%d)", o.MaxHeld, o.QueueSize)
	}
	if o.ColdStartTimeout <= 0 || o.ColdStartTimeout > time.Hour {
		bad("--cold-start-timeout %s: want (0, 1h]", o.ColdStartTimeout)
	}
	if o.ProbeInterval < time.Millisecond || o.ProbeInterval > 10*time.Second {
		bad("--probe-interval %s: want [1ms, 10s]", o.ProbeInterval)
	}
	if o.Resync < time.Second {
		bad("--resync %s: want at least 1s", o.Resync)
	}
	if o.DrainTimeout < 0 {
		bad("--drain-timeout %s: must not be negative", o.DrainTimeout)
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
		if _, _, _, err := parseServiceRef(o.ScalerService); err != nil {
			bad("--scaler-service: %w", err)
		}
		if len(o.ScalerAddresses) > 0 {
			bad("--scaler-service and --scaler-addresses: set one, not both")
		}
	}
	if _, err := labels.Parse(o.ActivatorSelector); err != nil || o.ActivatorSelector == "" {
		bad("--activator-selector %q: not a label selector: %v", o.ActivatorSelector, err)
	}
	if o.PodName == "" || o.PodNamespace == "" {
		bad("POD_NAME and POD_NAMESPACE: both required (downward API)")
	}
	switch o.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		bad("--log-level %q: want debug, info, warn or error", o.LogLevel)
	}
	if o.LogFormat != "json" && o.LogFormat != "text" {
		bad("--log-format %q: want json or text", o.LogFormat)
	}
	return errors.Join(problems...)
}

// parseServiceRef splits "namespace/name:port" (port a number or a name).
func parseServiceRef(s string) (ns, name, port string, err error) {
	ref, port, ok := strings.Cut(s, ":")
	ns, name, ok2 := strings.Cut(ref, "/")
	if !ok || !ok2 || ns == "" || name == "" || port == "" {
		return "", "", "", fmt.Errorf("%q: want namespace/name:port", s)
	}
	return ns, name, port, nil
}
