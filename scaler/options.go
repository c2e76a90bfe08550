package scaler

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/internal/holdpush"
	"github.com/ebb-dev/ebb/internal/kubeclient"
	"github.com/ebb-dev/ebb/internal/logging"
	"github.com/ebb-dev/ebb/internal/options"
)

// Options configures ebb-scaler. ParseOptions fills it from flags with
// environment fallbacks.
type Options struct {
	GroupSuffix string

	GRPCAddr  string // KEDA's ExternalScaler, gRPC health, holdpush
	AdminAddr string // /metrics, /apps, /healthz, /readyz

	Tick            time.Duration // how often every sidecar is read
	ReadTimeout     time.Duration // per sidecar read
	ReadParallelism int           // sidecar reads in flight at once
	StaleTicks      int           // failed reads during which a pod keeps its last value
	MaxRateWindow   time.Duration // longest rateWindow a ScaledObject may ask for
	HoldGrace       time.Duration // activator counts outlive its last stream this long
	HoldStaleAfter  time.Duration // an activator stream silent this long is cut

	TLSCertFile     string // serve gRPC over TLS with this certificate...
	TLSKeyFile      string // ...and key
	TLSClientCAFile string // and require client certificates signed by this CA

	Kubeconfig   string  // empty: in-cluster, then ~/.kube/config
	KubeAPIQPS   float64 // the scaler's requests to the API server per second, all clients together
	KubeAPIBurst int     // ...and at once above that
	Log          logging.Options

	// Set by programs that run the scaler in-process (tests); not flags.
	RestConfig *rest.Config         // used instead of Kubeconfig
	Client     kubernetes.Interface // used instead of RestConfig
	Logger     *logr.Logger         // used instead of one from Log
}

// Bounds of --tick (the chart's scaler.tick).
const (
	MinTick = 10 * time.Millisecond
	MaxTick = time.Minute
)

// DefaultReadTimeout is the longest --read-timeout a tick gets by default.
const DefaultReadTimeout = 300 * time.Millisecond

// DefaultOptions are the flag defaults.
func DefaultOptions() Options {
	return Options{
		GroupSuffix:     groupsuffix.Default,
		GRPCAddr:        ":9090",
		AdminAddr:       ":8080",
		Tick:            time.Second,
		ReadParallelism: 128,
		StaleTicks:      3,
		MaxRateWindow:   10 * time.Minute,
		HoldGrace:       holdpush.DefaultGrace,
		HoldStaleAfter:  holdpush.DefaultStaleAfter,
		KubeAPIQPS:      kubeclient.DefaultQPS,
		KubeAPIBurst:    kubeclient.DefaultBurst,
		Log:             logging.DefaultOptions(),
	}
}

// ParseOptions fills Options from args (without the program name) with
// environment fallbacks (package options says how) and validates them,
// returning every problem at once, or an error wrapping flag.ErrHelp for
// -h.
func ParseOptions(args []string, getenv func(string) string) (Options, error) {
	return options.Parse("ebb-scaler", DefaultOptions(), args, getenv)
}

// Bind adds the scaler's flags to s.
func (o *Options) Bind(s *options.Set) {
	s.String(&o.GroupSuffix, "api-group-suffix", "API group suffix of this ebb instance: pods are found by the label <suffix>/app")
	s.String(&o.GRPCAddr, "grpc-addr", "address of the gRPC server (KEDA external scaler, health, activator pushes)")
	s.String(&o.AdminAddr, "admin-addr", "address of the HTTP server for /metrics, /apps, /healthz and /readyz")
	s.Duration(&o.Tick, "tick", "how often every sidecar is read")
	s.Duration(&o.ReadTimeout, "read-timeout", "timeout of one sidecar read, less than --tick (a pod whose read times out or takes more than half of it is read off the tick until its reads are fast again); 0: a third of --tick, at most 300ms")
	s.Int(&o.ReadParallelism, "read-parallelism", "sidecar reads in flight at once")
	s.Int(&o.StaleTicks, "stale-ticks", "failed reads during which a pod keeps its last value before it is dropped")
	s.Duration(&o.MaxRateWindow, "max-rate-window", "longest rateWindow a ScaledObject may ask for (bounds memory)")
	s.Duration(&o.HoldGrace, "hold-grace", "how long an activator's held counts outlive its last stream")
	s.Duration(&o.HoldStaleAfter, "hold-stale-after", "an activator stream that sends nothing for this long is cut")
	s.String(&o.TLSCertFile, "tls-cert-file", "serve gRPC over TLS with this PEM certificate (reloaded when it changes)")
	s.String(&o.TLSKeyFile, "tls-key-file", "PEM key of --tls-cert-file")
	s.String(&o.TLSClientCAFile, "tls-client-ca-file", "require gRPC clients (KEDA, activators) to present a certificate signed by this PEM CA")
	s.Kubeconfig(&o.Kubeconfig)
	s.KubeAPI(&o.KubeAPIQPS, &o.KubeAPIBurst)
	o.Log.Bind(s)
}

// Complete derives what was left at zero from what was set: --read-timeout
// from --tick, so a short --tick alone is a valid choice.
func (o *Options) Complete() {
	if o.ReadTimeout == 0 {
		o.ReadTimeout = min(DefaultReadTimeout, o.Tick/3)
	}
}

// Validate returns every problem with o at once.
func (o Options) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if _, err := groupsuffix.New(o.GroupSuffix); err != nil {
		bad("--api-group-suffix: %w", err)
	}
	if err := options.CheckListen(o.GRPCAddr); err != nil {
		bad("--grpc-addr %q: %w: set a listen address like :9090", o.GRPCAddr, err)
	}
	if err := options.CheckListen(o.AdminAddr); err != nil {
		bad("--admin-addr %q: %w: set a listen address like :8080", o.AdminAddr, err)
	}
	if o.Tick < MinTick || o.Tick > MaxTick {
		bad("--tick %s: want %s to %s", o.Tick, MinTick, MaxTick)
	}
	if o.ReadTimeout <= 0 || o.ReadTimeout >= o.Tick {
		bad("--read-timeout %s: must be above 0 and below --tick (%s)", o.ReadTimeout, o.Tick)
	}
	if o.ReadParallelism < 1 {
		bad("--read-parallelism %d: must be at least 1", o.ReadParallelism)
	}
	if o.StaleTicks < 0 {
		bad("--stale-ticks %d: must be 0 or more", o.StaleTicks)
	}
	if o.MaxRateWindow < o.Tick || o.MaxRateWindow < DefaultRateWindow {
		bad("--max-rate-window %s: must be at least --tick and the default rateWindow (%s)", o.MaxRateWindow, DefaultRateWindow)
	}
	if o.HoldGrace <= 0 {
		bad("--hold-grace %s: must be above 0", o.HoldGrace)
	}
	if o.HoldStaleAfter <= holdpush.DefaultResend {
		bad("--hold-stale-after %s: must be above the activators' resend period (%s)", o.HoldStaleAfter, holdpush.DefaultResend)
	}
	if (o.TLSCertFile == "") != (o.TLSKeyFile == "") {
		bad("--tls-cert-file and --tls-key-file: set both or neither")
	}
	if o.TLSClientCAFile != "" && o.TLSCertFile == "" {
		bad("--tls-client-ca-file needs --tls-cert-file and --tls-key-file: mutual TLS needs server TLS")
	}
	files := [][2]string{{"--tls-cert-file", o.TLSCertFile}, {"--tls-key-file", o.TLSKeyFile}, {"--tls-client-ca-file", o.TLSClientCAFile}}
	if len(filepath.SplitList(o.Kubeconfig)) == 1 { // a KUBECONFIG list may name files that do not exist
		files = append(files, [2]string{"--kubeconfig", o.Kubeconfig})
	}
	for _, f := range files {
		if f[1] == "" {
			continue
		}
		if _, err := os.Stat(f[1]); err != nil {
			bad("%s: %w", f[0], err)
		}
	}
	errs = append(errs, options.CheckKubeAPI(o.KubeAPIQPS, o.KubeAPIBurst), o.Log.Validate())
	return errors.Join(errs...)
}
