package webhook

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"

	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/internal/stats"
	"github.com/ebb-dev/ebb/webhook/inject"
)

// Version tags the default sidecar image; release builds set it with
// -ldflags "-X github.com/ebb-dev/ebb/webhook.Version=v1.2.3".
var Version = "dev"

// TLS modes.
const (
	// TLSFiles serves the certificate in CertDir and reloads it when the
	// files change (cert-manager writes them through a Secret volume).
	TLSFiles = "files"
	// TLSSelfSigned makes a CA and serving certificate, keeps them in a
	// Secret, writes them to CertDir and sets the webhook configuration's
	// caBundle.
	TLSSelfSigned = "self-signed"
)

// Options configure one ebb-webhook process. Fill them with BindFlags (flags
// with environment fallbacks) and check them with Validate.
type Options struct {
	// APIGroupSuffix names this instance (default ebb.dev).
	APIGroupSuffix string
	// Kubeconfig is a kubeconfig path; empty means $KUBECONFIG, in-cluster,
	// then ~/.kube/config (controller-runtime's rules).
	Kubeconfig string
	// RESTConfig, when set (tests), is used instead of Kubeconfig.
	RESTConfig *rest.Config

	// WebhookHost and WebhookPort are where the admission server listens.
	WebhookHost string
	WebhookPort int
	// CertDir holds CertName and KeyName (the serving certificate).
	CertDir, CertName, KeyName string
	// TLSMode is TLSFiles or TLSSelfSigned.
	TLSMode string
	// Namespace the webhook runs in (its Secret and leader-election lease).
	Namespace string
	// ServiceName is the webhook's Service; the self-signed certificate is
	// valid for its cluster DNS names.
	ServiceName string
	// SecretName holds the self-signed CA and serving certificate.
	SecretName string
	// ExtraSANs are more DNS names or IPs for the self-signed certificate.
	ExtraSANs []string
	// CertCheckInterval is how often self-signed mode checks the certificate
	// and the caBundle.
	CertCheckInterval time.Duration

	// Sidecar settings.
	SidecarImage           string
	SidecarImagePullPolicy string
	SidecarCPURequest      string
	SidecarMemoryRequest   string
	SidecarCPULimit        string
	SidecarMemoryLimit     string
	SidecarListenPort      int
	SidecarAdminPort       int
	SidecarDrainTimeout    time.Duration

	// MetricsAddr and HealthAddr serve /metrics and /healthz,/readyz ("0"
	// turns one off).
	MetricsAddr, HealthAddr string
	// PprofAddr serves net/http/pprof ("0", the default, turns it off).
	PprofAddr string
	// LeaderElect makes the AppRoute controller run in one replica at a time.
	LeaderElect bool
	// LogFormat is json or console; LogLevel debug or info.
	LogFormat, LogLevel string

	envErrs []error // environment values that did not parse
}

// DefaultOptions are the options of a process started without flags.
func DefaultOptions() Options {
	return Options{
		APIGroupSuffix:         groupsuffix.Default,
		WebhookPort:            9443,
		CertDir:                "/var/run/ebb/tls",
		CertName:               "tls.crt",
		KeyName:                "tls.key",
		TLSMode:                TLSFiles,
		ServiceName:            "ebb-webhook",
		SecretName:             "ebb-webhook-tls",
		CertCheckInterval:      time.Minute,
		SidecarImage:           inject.DefaultImageRepository + ":" + Version,
		SidecarImagePullPolicy: string(corev1.PullIfNotPresent),
		SidecarCPURequest:      "25m",
		SidecarMemoryRequest:   "32Mi",
		SidecarMemoryLimit:     "128Mi",
		SidecarListenPort:      stats.DefaultListenPort,
		SidecarAdminPort:       stats.DefaultAdminPort,
		SidecarDrainTimeout:    20 * time.Second,
		MetricsAddr:            ":8080",
		HealthAddr:             ":8081",
		PprofAddr:              "0",
		LogFormat:              "json",
		LogLevel:               "info",
	}
}

// BindFlags registers every option on fs. A flag's default is the
// environment variable named in its usage when set, else the value in o.
func (o *Options) BindFlags(fs *flag.FlagSet) {
	str := func(p *string, name, env, usage string) {
		if v, ok := os.LookupEnv(env); ok {
			*p = v
		}
		fs.StringVar(p, name, *p, usage+" (env "+env+")")
	}
	num := func(p *int, name, env, usage string) {
		if v, ok := os.LookupEnv(env); ok {
			if _, err := fmt.Sscan(v, p); err != nil {
				o.envErrs = append(o.envErrs, fmt.Errorf("%s=%q: not a number", env, v))
			}
		}
		fs.IntVar(p, name, *p, usage+" (env "+env+")")
	}
	dur := func(p *time.Duration, name, env, usage string) {
		if v, ok := os.LookupEnv(env); ok {
			d, err := time.ParseDuration(v)
			if err != nil {
				o.envErrs = append(o.envErrs, fmt.Errorf("%s=%q: not a duration", env, v))
			}
			*p = d
		}
		fs.DurationVar(p, name, *p, usage+" (env "+env+")")
	}
	str(&o.APIGroupSuffix, "api-group-suffix", "EBB_API_GROUP_SUFFIX", "API group suffix naming this instance")
	str(&o.Kubeconfig, "kubeconfig", "EBB_KUBECONFIG", "kubeconfig path; empty means $KUBECONFIG, in-cluster, then ~/.kube/config")
	str(&o.WebhookHost, "webhook-host", "EBB_WEBHOOK_HOST", "address the admission server binds (empty: all)")
	num(&o.WebhookPort, "webhook-port", "EBB_WEBHOOK_PORT", "port of the admission server")
	str(&o.CertDir, "cert-dir", "EBB_CERT_DIR", "directory of the serving certificate")
	str(&o.CertName, "cert-name", "EBB_CERT_NAME", "serving certificate file in --cert-dir")
	str(&o.KeyName, "key-name", "EBB_KEY_NAME", "serving key file in --cert-dir")
	str(&o.TLSMode, "tls-mode", "EBB_TLS_MODE", "files (certificate from --cert-dir, reloaded on change) or self-signed")
	str(&o.Namespace, "namespace", "POD_NAMESPACE", "namespace the webhook runs in")
	str(&o.ServiceName, "service-name", "EBB_SERVICE_NAME", "the webhook's Service (self-signed certificate names)")
	str(&o.SecretName, "tls-secret", "EBB_TLS_SECRET", "Secret holding the self-signed CA and certificate")
	if v, ok := os.LookupEnv("EBB_EXTRA_SANS"); ok {
		o.ExtraSANs = splitList(v)
	}
	fs.Func("extra-sans", "comma-separated extra DNS names or IPs of the self-signed certificate (env EBB_EXTRA_SANS)", func(v string) error {
		o.ExtraSANs = splitList(v)
		return nil
	})
	dur(&o.CertCheckInterval, "cert-check-interval", "EBB_CERT_CHECK_INTERVAL", "how often self-signed mode checks the certificate and caBundle")
	str(&o.SidecarImage, "sidecar-image", "EBB_SIDECAR_IMAGE", "sidecar image")
	str(&o.SidecarImagePullPolicy, "sidecar-image-pull-policy", "EBB_SIDECAR_IMAGE_PULL_POLICY", "sidecar imagePullPolicy")
	str(&o.SidecarCPURequest, "sidecar-cpu-request", "EBB_SIDECAR_CPU_REQUEST", "sidecar CPU request (empty: none)")
	str(&o.SidecarMemoryRequest, "sidecar-memory-request", "EBB_SIDECAR_MEMORY_REQUEST", "sidecar memory request (empty: none)")
	str(&o.SidecarCPULimit, "sidecar-cpu-limit", "EBB_SIDECAR_CPU_LIMIT", "sidecar CPU limit (empty: none)")
	str(&o.SidecarMemoryLimit, "sidecar-memory-limit", "EBB_SIDECAR_MEMORY_LIMIT", "sidecar memory limit (empty: none)")
	num(&o.SidecarListenPort, "sidecar-listen-port", "EBB_SIDECAR_LISTEN_PORT", "sidecar data port")
	num(&o.SidecarAdminPort, "sidecar-admin-port", "EBB_SIDECAR_ADMIN_PORT", "sidecar admin port (stats, ready, metrics)")
	dur(&o.SidecarDrainTimeout, "sidecar-drain-timeout", "EBB_SIDECAR_DRAIN_TIMEOUT", "default sidecar drain timeout on SIGTERM")
	str(&o.MetricsAddr, "metrics-bind-address", "EBB_METRICS_BIND_ADDRESS", "address of /metrics (0: off)")
	str(&o.HealthAddr, "health-probe-bind-address", "EBB_HEALTH_PROBE_BIND_ADDRESS", "address of /healthz and /readyz (0: off)")
	str(&o.PprofAddr, "pprof-bind-address", "EBB_PPROF_BIND_ADDRESS", "address of /debug/pprof (0: off)")
	fs.BoolVar(&o.LeaderElect, "leader-elect", envBool("EBB_LEADER_ELECT", o.LeaderElect), "run the AppRoute controller in one replica at a time (env EBB_LEADER_ELECT)")
	str(&o.LogFormat, "log-format", "EBB_LOG_FORMAT", "json or console")
	str(&o.LogLevel, "log-level", "EBB_LOG_LEVEL", "info or debug")
}

func envBool(name string, def bool) bool {
	switch strings.ToLower(os.Getenv(name)) {
	case "1", "true", "yes":
		return true
	case "0", "false", "no":
		return false
	}
	return def
}

// Validate returns every problem with o at once, or nil.
func (o *Options) Validate() error {
	errs := append([]error(nil), o.envErrs...)
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if _, err := groupsuffix.New(o.APIGroupSuffix); err != nil {
		add("--api-group-suffix: %w", err)
	}
	if o.WebhookPort < 1 || o.WebhookPort > 65535 {
		add("--webhook-port %d: not a port number", o.WebhookPort)
	}
	if o.CertDir == "" {
		add("--cert-dir: must be set")
	}
	switch o.TLSMode {
	case TLSFiles:
	case TLSSelfSigned:
		if o.Namespace == "" {
			add("--namespace (or POD_NAMESPACE): required with --tls-mode=%s to keep the certificate in a Secret", TLSSelfSigned)
		}
		if errs := validation.IsDNS1123Subdomain(o.SecretName); len(errs) > 0 {
			add("--tls-secret %q: %s", o.SecretName, strings.Join(errs, ", "))
		}
		if errs := validation.IsDNS1035Label(o.ServiceName); len(errs) > 0 {
			add("--service-name %q: %s", o.ServiceName, strings.Join(errs, ", "))
		}
		if o.CertCheckInterval < time.Minute {
			add("--cert-check-interval %s: at least 1m", o.CertCheckInterval)
		}
	default:
		add("--tls-mode %q: must be %q or %q", o.TLSMode, TLSFiles, TLSSelfSigned)
	}
	if o.SidecarImage == "" {
		add("--sidecar-image: must be set")
	}
	switch corev1.PullPolicy(o.SidecarImagePullPolicy) {
	case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		add("--sidecar-image-pull-policy %q: must be Always, IfNotPresent or Never", o.SidecarImagePullPolicy)
	}
	for _, q := range []struct{ flag, v string }{
		{"--sidecar-cpu-request", o.SidecarCPURequest}, {"--sidecar-memory-request", o.SidecarMemoryRequest},
		{"--sidecar-cpu-limit", o.SidecarCPULimit}, {"--sidecar-memory-limit", o.SidecarMemoryLimit},
	} {
		if q.v == "" {
			continue
		}
		if _, err := resource.ParseQuantity(q.v); err != nil {
			add("%s %q: %w", q.flag, q.v, err)
		}
	}
	for _, p := range []struct {
		flag string
		v    int
	}{{"--sidecar-listen-port", o.SidecarListenPort}, {"--sidecar-admin-port", o.SidecarAdminPort}} {
		if p.v < 1 || p.v > 65535 {
			add("%s %d: not a port number", p.flag, p.v)
		}
	}
	if o.SidecarListenPort == o.SidecarAdminPort {
		add("--sidecar-listen-port and --sidecar-admin-port: both %d", o.SidecarListenPort)
	}
	if o.SidecarDrainTimeout < 0 || o.SidecarDrainTimeout > inject.MaxDrainTimeout {
		add("--sidecar-drain-timeout %s: must be from 0s to %s", o.SidecarDrainTimeout, inject.MaxDrainTimeout)
	}
	if o.LeaderElect && o.Namespace == "" {
		add("--namespace (or POD_NAMESPACE): required with --leader-elect")
	}
	if o.LogFormat != "json" && o.LogFormat != "console" {
		add("--log-format %q: must be json or console", o.LogFormat)
	}
	if o.LogLevel != "info" && o.LogLevel != "debug" {
		add("--log-level %q: must be info or debug", o.LogLevel)
	}
	return errors.Join(errs...)
}

func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// sidecarConfig turns validated options into the injector's Config.
func (o *Options) sidecarConfig(names groupsuffix.Names) inject.Config {
	cfg := inject.DefaultConfig(names, Version)
	cfg.Image = o.SidecarImage
	cfg.ImagePullPolicy = corev1.PullPolicy(o.SidecarImagePullPolicy)
	cfg.ListenPort, cfg.AdminPort = int32(o.SidecarListenPort), int32(o.SidecarAdminPort)
	cfg.DrainTimeout = o.SidecarDrainTimeout
	cfg.Resources = corev1.ResourceRequirements{}
	set := func(l *corev1.ResourceList, name corev1.ResourceName, v string) {
		if v == "" {
			return
		}
		if *l == nil {
			*l = corev1.ResourceList{}
		}
		(*l)[name] = resource.MustParse(v) // checked by Validate
	}
	set(&cfg.Resources.Requests, corev1.ResourceCPU, o.SidecarCPURequest)
	set(&cfg.Resources.Requests, corev1.ResourceMemory, o.SidecarMemoryRequest)
	set(&cfg.Resources.Limits, corev1.ResourceCPU, o.SidecarCPULimit)
	set(&cfg.Resources.Limits, corev1.ResourceMemory, o.SidecarMemoryLimit)
	return cfg
}
