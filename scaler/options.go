package scaler

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/internal/holdpush"
)

// Options configures ebb-scaler. ParseOptions fills it from flags, with an
// environment variable EBB_SCALER_<FLAG> (upper case, '-' as '_') for every
// flag not given on the command line.
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

	Kubeconfig string // empty: in-cluster, then $KUBECONFIG / ~/.kube/config
	LogFormat  string // json or console
	LogLevel   int    // 0 info, 1 debug, ...

	// Set by programs that run the scaler in-process (tests); not flags.
	RestConfig *rest.Config         // used instead of Kubeconfig
	Client     kubernetes.Interface // used instead of RestConfig
	Logger     *logr.Logger         // used instead of a zap logger
}

// DefaultOptions are the flag defaults.
func DefaultOptions() Options {
	return Options{
		GroupSuffix:     groupsuffix.Default,
		GRPCAddr:        ":9090",
		AdminAddr:       ":8080",
		Tick:            time.Second,
		ReadTimeout:     300 * time.Millisecond,
		ReadParallelism: 128,
		StaleTicks:      3,
		MaxRateWindow:   10 * time.Minute,
		HoldGrace:       holdpush.DefaultGrace,
		HoldStaleAfter:  holdpush.DefaultStaleAfter,
		LogFormat:       "json",
	}
}

// EnvPrefix prefixes the environment fallback of every flag.
const EnvPrefix = "EBB_SCALER_"

// ParseOptions parses args (without the program name) with env fallbacks and
// validates the result, returning every problem at once. It returns an error
// wrapping flag.ErrHelp for -h.
func ParseOptions(args []string, getenv func(string) string) (Options, error) {
	o := DefaultOptions()
	fs := flagSet(&o)
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		return o, fmt.Errorf("flags: %w", err)
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("flags: unexpected arguments %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		env := EnvName(f.Name)
		if v := getenv(env); v != "" && !set[f.Name] {
			if err := f.Value.Set(v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", env, v, err))
			}
		}
	})
	if err := errors.Join(append(errs, o.Validate())...); err != nil {
		return o, err
	}
	return o, nil
}

// EnvName is the environment fallback of a flag.
func EnvName(flagName string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Usage describes the flags.
func Usage(w io.Writer) {
	fmt.Fprintf(w, "Usage of ebb-scaler (every flag falls back to %s<FLAG>, e.g. %s):\n", EnvPrefix, EnvName("tick"))
	o := DefaultOptions()
	fs := flagSet(&o)
	fs.SetOutput(w)
	fs.PrintDefaults()
}

func flagSet(o *Options) *flag.FlagSet {
	fs := flag.NewFlagSet("ebb-scaler", flag.ContinueOnError)
	fs.StringVar(&o.GroupSuffix, "api-group-suffix", o.GroupSuffix, "API group suffix of this ebb instance: pods are found by the label <suffix>/app")
	fs.StringVar(&o.GRPCAddr, "grpc-addr", o.GRPCAddr, "address of the gRPC server (KEDA external scaler, health, activator pushes)")
	fs.StringVar(&o.AdminAddr, "admin-addr", o.AdminAddr, "address of the HTTP server for /metrics, /apps, /healthz and /readyz")
	fs.DurationVar(&o.Tick, "tick", o.Tick, "how often every sidecar is read")
	fs.DurationVar(&o.ReadTimeout, "read-timeout", o.ReadTimeout, "timeout of one sidecar read; less than --tick")
	fs.IntVar(&o.ReadParallelism, "read-parallelism", o.ReadParallelism, "sidecar reads in flight at once")
	fs.IntVar(&o.StaleTicks, "stale-ticks", o.StaleTicks, "failed reads during which a pod keeps its last value before it is dropped")
	fs.DurationVar(&o.MaxRateWindow, "max-rate-window", o.MaxRateWindow, "longest rateWindow a ScaledObject may ask for (bounds memory)")
	fs.DurationVar(&o.HoldGrace, "hold-grace", o.HoldGrace, "how long an activator's held counts outlive its last stream")
	fs.DurationVar(&o.HoldStaleAfter, "hold-stale-after", o.HoldStaleAfter, "an activator stream that sends nothing for this long is cut")
	fs.StringVar(&o.TLSCertFile, "tls-cert-file", o.TLSCertFile, "serve gRPC over TLS with this PEM certificate (reloaded when it changes)")
	fs.StringVar(&o.TLSKeyFile, "tls-key-file", o.TLSKeyFile, "PEM key of --tls-cert-file")
	fs.StringVar(&o.TLSClientCAFile, "tls-client-ca-file", o.TLSClientCAFile, "require gRPC clients (KEDA, activators) to present a certificate signed by this PEM CA")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "kubeconfig file; empty means in-cluster, then $KUBECONFIG or ~/.kube/config")
	fs.StringVar(&o.LogFormat, "log-format", o.LogFormat, "json or console")
	fs.IntVar(&o.LogLevel, "log-level", o.LogLevel, "verbosity: 0 info, 1 debug, more for more")
	return fs
}

// Validate returns every problem with o at once.
func (o Options) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if _, err := groupsuffix.New(o.GroupSuffix); err != nil {
		bad("--api-group-suffix: %w", err)
	}
	if o.GRPCAddr == "" {
		bad("--grpc-addr is empty: set a listen address like :9090")
	}
	if o.AdminAddr == "" {
		bad("--admin-addr is empty: set a listen address like :8080")
	}
	if o.Tick < 10*time.Millisecond {
		bad("--tick %s: must be at least 10ms", o.Tick)
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
	for _, f := range [][2]string{{"--tls-cert-file", o.TLSCertFile}, {"--tls-key-file", o.TLSKeyFile}, {"--tls-client-ca-file", o.TLSClientCAFile}, {"--kubeconfig", o.Kubeconfig}} {
		if f[1] == "" {
			continue
		}
		if _, err := os.Stat(f[1]); err != nil {
			bad("%s: %w", f[0], err)
		}
	}
	switch o.LogFormat {
	case "json", "console":
	default:
		bad("--log-format %q: must be json or console", o.LogFormat)
	}
	if o.LogLevel < 0 {
		bad("--log-level %d: must be 0 or more", o.LogLevel)
	}
	return errors.Join(errs...)
}
