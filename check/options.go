package check

import (
	"errors"
	"fmt"
	"net/url"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/ebb-dev/ebb/internal/logging"
	"github.com/ebb-dev/ebb/internal/options"
	"github.com/ebb-dev/ebb/internal/sidecarapi"
)

// Options configures ebb-check.
type Options struct {
	AppNamespace     string // where the test app runs
	AppSelector      string // its pods' labels
	AppURL           string // its Service
	SidecarAdminPort int

	ScalerAddress                               string // host:port of the scaler's gRPC
	ScalerCAFile, ScalerCertFile, ScalerKeyFile string
	ScalerServerName                            string // default: the host of ScalerAddress

	ActivatorURL string // the activator's readiness URL

	Timeout    time.Duration // for all the checks
	Kubeconfig string
	Log        logging.Options
}

// DefaultOptions are the flag defaults.
func DefaultOptions() Options {
	return Options{SidecarAdminPort: sidecarapi.DefaultAdminPort, Timeout: 3 * time.Minute, Log: logging.DefaultOptions()}
}

// ParseOptions fills Options from args with environment fallbacks (package
// options says how) and validates them.
func ParseOptions(args []string, getenv func(string) string) (Options, error) {
	return options.Parse("ebb-check", DefaultOptions(), args, getenv)
}

// Bind adds ebb-check's flags to s.
func (o *Options) Bind(s *options.Set) {
	s.String(&o.AppNamespace, "app-namespace", "namespace of the test app")
	s.String(&o.AppSelector, "app-selector", "label selector of the test app's pods")
	s.String(&o.AppURL, "app-url", "URL of the test app's Service")
	s.Int(&o.SidecarAdminPort, "sidecar-admin-port", "admin port of the injected sidecar (/stats)")
	s.String(&o.ScalerAddress, "scaler-address", "host:port of the scaler's gRPC (health is checked)")
	s.String(&o.ScalerCAFile, "scaler-ca-file", "check the scaler over TLS, verifying it against this PEM CA")
	s.String(&o.ScalerCertFile, "scaler-cert-file", "PEM client certificate for the scaler")
	s.String(&o.ScalerKeyFile, "scaler-key-file", "PEM key of --scaler-cert-file")
	s.String(&o.ScalerServerName, "scaler-server-name", "name the scaler's certificate must carry; default the host of --scaler-address")
	s.String(&o.ActivatorURL, "activator-url", "the activator's readiness URL")
	s.Duration(&o.Timeout, "timeout", "how long all the checks may take")
	s.Kubeconfig(&o.Kubeconfig)
	o.Log.Bind(s)
}

// Validate returns every problem with o at once.
func (o Options) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if o.AppNamespace == "" {
		bad("--app-namespace is required")
	}
	if sel, err := labels.Parse(o.AppSelector); err != nil || sel.Empty() {
		bad("--app-selector %q: want a non-empty label selector (%v)", o.AppSelector, err)
	}
	for name, u := range map[string]string{"--app-url": o.AppURL, "--activator-url": o.ActivatorURL} {
		if p, err := url.Parse(u); err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			bad("%s %q: want an http(s) URL", name, u)
		}
	}
	if err := options.CheckListen(o.ScalerAddress); err != nil || o.ScalerAddress == "" || o.ScalerAddress[0] == ':' {
		bad("--scaler-address %q: want host:port", o.ScalerAddress)
	}
	if (o.ScalerCertFile == "") != (o.ScalerKeyFile == "") {
		bad("--scaler-cert-file and --scaler-key-file: set both or neither")
	}
	if o.ScalerCertFile != "" && o.ScalerCAFile == "" {
		bad("--scaler-cert-file needs --scaler-ca-file")
	}
	if o.SidecarAdminPort < 1 || o.SidecarAdminPort > 65535 {
		bad("--sidecar-admin-port %d: want 1 to 65535", o.SidecarAdminPort)
	}
	if o.Timeout <= 0 {
		bad("--timeout %s: must be above 0", o.Timeout)
	}
	errs = append(errs, o.Log.Validate())
	return errors.Join(errs...)
}
