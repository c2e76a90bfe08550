package federation

import (
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"

	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/internal/kubeclient"
	"github.com/ebb-dev/ebb/internal/logging"
	"github.com/ebb-dev/ebb/internal/options"
)

// Options configures ebb-federation. ParseOptions fills it from flags with
// environment fallbacks.
type Options struct {
	GroupSuffix string
	// Namespace holds the member clusters' kubeconfig Secrets and the
	// leader-election Lease.
	Namespace string
	// Interval is how often every member of every FederatedScale is read.
	Interval time.Duration
	// ReadTimeout bounds one request to a member's API server.
	ReadTimeout time.Duration

	MetricsAddr string
	HealthAddr  string
	LeaderElect bool
	Kubeconfig  string
	// KubeAPIQPS and KubeAPIBurst limit the requests to this cluster's API
	// server, all clients together.
	KubeAPIQPS   float64
	KubeAPIBurst int
	Log          logging.Options

	// Set by programs that run the controller in-process (tests); not flags.
	RestConfig *rest.Config
	Logger     *logr.Logger
}

// Bounds of --interval.
const (
	MinInterval = 100 * time.Millisecond
	MaxInterval = time.Minute
)

// DefaultOptions are the flag defaults.
func DefaultOptions() Options {
	return Options{
		GroupSuffix:  groupsuffix.Default,
		KubeAPIQPS:   kubeclient.DefaultQPS,
		KubeAPIBurst: kubeclient.DefaultBurst,
		Interval:     2 * time.Second,
		ReadTimeout:  2 * time.Second,
		MetricsAddr:  ":8080",
		HealthAddr:   ":8081",
		Log:          logging.DefaultOptions(),
	}
}

// ParseOptions fills Options from args (without the program name) with
// environment fallbacks and validates them, returning every problem at
// once, or an error wrapping flag.ErrHelp for -h.
func ParseOptions(args []string, getenv func(string) string) (Options, error) {
	return options.Parse("ebb-federation", DefaultOptions(), args, getenv)
}

// Bind adds the controller's flags to s.
func (o *Options) Bind(s *options.Set) {
	s.String(&o.GroupSuffix, "api-group-suffix", "API group suffix of this ebb instance: FederatedScales are in routing.<suffix>")
	s.String(&o.Namespace, "namespace", "namespace of the member clusters' kubeconfig Secrets (labelled <suffix>/member-cluster) and the leader-election Lease")
	s.Env("namespace", "POD_NAMESPACE")
	s.Duration(&o.Interval, "interval", "how often every member cluster of every FederatedScale is read")
	s.Duration(&o.ReadTimeout, "read-timeout", "timeout of one request to a member cluster's API server")
	s.String(&o.MetricsAddr, "metrics-bind-address", "address of /metrics (0: off)")
	s.String(&o.HealthAddr, "health-probe-bind-address", "address of /healthz and /readyz (0: off)")
	s.Bool(&o.LeaderElect, "leader-elect", "run the controller in one replica at a time")
	s.Kubeconfig(&o.Kubeconfig)
	s.KubeAPI(&o.KubeAPIQPS, &o.KubeAPIBurst)
	o.Log.Bind(s)
}

// Validate returns every problem with o at once.
func (o Options) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if _, err := groupsuffix.New(o.GroupSuffix); err != nil {
		bad("--api-group-suffix: %w", err)
	}
	if o.Namespace == "" {
		bad("--namespace (or POD_NAMESPACE): required: the member clusters' Secrets are there")
	}
	if o.Interval < MinInterval || o.Interval > MaxInterval {
		bad("--interval %s: want %s to %s", o.Interval, MinInterval, MaxInterval)
	}
	if o.ReadTimeout <= 0 || o.ReadTimeout > MaxInterval {
		bad("--read-timeout %s: want above 0, at most %s", o.ReadTimeout, MaxInterval)
	}
	if err := options.CheckKubeAPI(o.KubeAPIQPS, o.KubeAPIBurst); err != nil {
		errs = append(errs, err)
	}
	if err := o.Log.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
