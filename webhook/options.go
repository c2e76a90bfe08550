package webhook

import (
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"

	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/internal/kubeclient"
	"github.com/ebb-dev/ebb/internal/logging"
	"github.com/ebb-dev/ebb/internal/options"
	"github.com/ebb-dev/ebb/internal/tracing"
	"github.com/ebb-dev/ebb/internal/workload"
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

// Options configure one ebb-webhook process. Fill them with ParseOptions.
type Options struct {
	// GroupSuffix names this instance (default ebb.dev).
	GroupSuffix string
	// Kubeconfig is a kubeconfig path; empty means $KUBECONFIG, in-cluster,
	// then ~/.kube/config (controller-runtime's rules).
	Kubeconfig string
	// KubeAPIQPS and KubeAPIBurst limit the webhook's requests to the API
	// server, all its clients together.
	KubeAPIQPS   float64
	KubeAPIBurst int
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
	// ScaleTargets are the custom workload kinds routed besides Deployments
	// and StatefulSets, each <resource>.<group> (workload.ParseTargets).
	ScaleTargets []string
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
	// SidecarRequestMetrics and SidecarTracing are the injected sidecars'
	// --request-metrics, --otlp-endpoint and --trace-sampling.
	SidecarRequestMetrics bool
	SidecarTracing        tracing.Options

	// MetricsAddr and HealthAddr serve /metrics and /healthz,/readyz ("0"
	// turns one off).
	MetricsAddr, HealthAddr string
	// PprofAddr serves net/http/pprof ("0", the default, turns it off).
	PprofAddr string
	// LeaderElect makes the AppRoute controller run in one replica at a time.
	LeaderElect bool
	// Log is --log-level and --log-format.
	Log logging.Options
}

// DefaultOptions are the options of a process started without flags. The
// sidecar settings are inject.DefaultConfig's.
func DefaultOptions() Options {
	sc := inject.DefaultConfig(groupsuffix.MustNew(groupsuffix.Default), Version)
	quantity := func(l corev1.ResourceList, name corev1.ResourceName) string {
		if q, ok := l[name]; ok {
			return q.String()
		}
		return ""
	}
	return Options{
		GroupSuffix:            groupsuffix.Default,
		KubeAPIQPS:             kubeclient.DefaultQPS,
		KubeAPIBurst:           kubeclient.DefaultBurst,
		WebhookPort:            9443,
		CertDir:                "/var/run/ebb/tls",
		CertName:               "tls.crt",
		KeyName:                "tls.key",
		TLSMode:                TLSFiles,
		ServiceName:            "ebb-webhook",
		SecretName:             "ebb-webhook-tls",
		CertCheckInterval:      time.Minute,
		SidecarImage:           sc.Image,
		SidecarImagePullPolicy: string(sc.ImagePullPolicy),
		SidecarCPURequest:      quantity(sc.Resources.Requests, corev1.ResourceCPU),
		SidecarMemoryRequest:   quantity(sc.Resources.Requests, corev1.ResourceMemory),
		SidecarCPULimit:        quantity(sc.Resources.Limits, corev1.ResourceCPU),
		SidecarMemoryLimit:     quantity(sc.Resources.Limits, corev1.ResourceMemory),
		SidecarListenPort:      int(sc.ListenPort),
		SidecarAdminPort:       int(sc.AdminPort),
		SidecarDrainTimeout:    sc.DrainTimeout,
		SidecarRequestMetrics:  sc.RequestMetrics,
		SidecarTracing:         sc.Tracing,
		MetricsAddr:            ":8080",
		HealthAddr:             ":8081",
		PprofAddr:              "0",
		Log:                    logging.DefaultOptions(),
	}
}

// ParseOptions fills Options from args (without the program name) with
// environment fallbacks (package options says how) and validates them,
// returning every problem at once, or an error wrapping flag.ErrHelp for
// -h.
func ParseOptions(args []string, getenv func(string) string) (Options, error) {
	return options.Parse("ebb-webhook", DefaultOptions(), args, getenv)
}

// Bind adds the webhook's flags to s.
func (o *Options) Bind(s *options.Set) {
	s.String(&o.GroupSuffix, "api-group-suffix", "API group suffix naming this instance")
	s.Kubeconfig(&o.Kubeconfig)
	s.KubeAPI(&o.KubeAPIQPS, &o.KubeAPIBurst)
	s.String(&o.WebhookHost, "webhook-host", "address the admission server binds (empty: all)")
	s.Int(&o.WebhookPort, "webhook-port", "port of the admission server")
	s.String(&o.CertDir, "cert-dir", "directory of the serving certificate")
	s.String(&o.CertName, "cert-name", "serving certificate file in --cert-dir")
	s.String(&o.KeyName, "key-name", "serving key file in --cert-dir")
	s.String(&o.TLSMode, "tls-mode", "files (certificate from --cert-dir, reloaded on change) or self-signed")
	s.String(&o.Namespace, "namespace", "namespace the webhook runs in")
	s.Env("namespace", "POD_NAMESPACE")
	s.String(&o.ServiceName, "service-name", "the webhook's Service (self-signed certificate names)")
	s.String(&o.SecretName, "tls-secret", "Secret holding the self-signed CA and certificate")
	s.List(&o.ExtraSANs, "extra-sans", "comma-separated extra DNS names or IPs of the self-signed certificate")
	s.List(&o.ScaleTargets, "scale-targets", "comma-separated custom workload kinds to route besides Deployments and StatefulSets, each <resource>.<group> (PodSpecable, with the scale subresource), such as rollouts.argoproj.io")
	s.Duration(&o.CertCheckInterval, "cert-check-interval", "how often self-signed mode checks the certificate and caBundle")
	s.String(&o.SidecarImage, "sidecar-image", "sidecar image")
	s.String(&o.SidecarImagePullPolicy, "sidecar-image-pull-policy", "sidecar imagePullPolicy")
	s.String(&o.SidecarCPURequest, "sidecar-cpu-request", "sidecar CPU request (empty: none)")
	s.String(&o.SidecarMemoryRequest, "sidecar-memory-request", "sidecar memory request (empty: none)")
	s.String(&o.SidecarCPULimit, "sidecar-cpu-limit", "sidecar CPU limit (empty: none)")
	s.String(&o.SidecarMemoryLimit, "sidecar-memory-limit", "sidecar memory limit (empty: none)")
	s.Int(&o.SidecarListenPort, "sidecar-listen-port", "sidecar data port")
	s.Int(&o.SidecarAdminPort, "sidecar-admin-port", "sidecar admin port (stats, ready, metrics)")
	s.Duration(&o.SidecarDrainTimeout, "sidecar-drain-timeout", "default sidecar drain timeout on SIGTERM")
	s.Bool(&o.SidecarRequestMetrics, "sidecar-request-metrics", "sidecars export the request-duration histogram and status counts")
	s.String(&o.SidecarTracing.Endpoint, "sidecar-otlp-endpoint", "OTLP/HTTP receiver the sidecars send spans to (http://host:4318); empty: sidecars do not trace")
	s.Float64(&o.SidecarTracing.Sampling, "sidecar-trace-sampling", "ratio (0-1) of the traces a sidecar starts that are sampled")
	s.String(&o.MetricsAddr, "metrics-bind-address", "address of /metrics (0: off)")
	s.String(&o.HealthAddr, "health-probe-bind-address", "address of /healthz and /readyz (0: off)")
	s.String(&o.PprofAddr, "pprof-bind-address", "address of /debug/pprof (0: off)")
	s.Bool(&o.LeaderElect, "leader-elect", "run the AppRoute controller in one replica at a time")
	o.Log.Bind(s)
}

// Validate returns every problem with o at once, or nil.
func (o *Options) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if _, err := groupsuffix.New(o.GroupSuffix); err != nil {
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
	if err := o.SidecarTracing.Validate(); err != nil {
		add("%s", strings.ReplaceAll(strings.ReplaceAll(err.Error(), "--otlp-endpoint", "--sidecar-otlp-endpoint"), "--trace-sampling", "--sidecar-trace-sampling"))
	}
	if _, err := workload.ParseTargets(strings.Join(o.ScaleTargets, ",")); err != nil {
		add("--scale-targets: %w", err)
	}
	errs = append(errs, options.CheckKubeAPI(o.KubeAPIQPS, o.KubeAPIBurst), o.Log.Validate())
	return errors.Join(errs...)
}

// sidecarConfig turns validated options into the injector's Config.
func (o *Options) sidecarConfig(names groupsuffix.Names) inject.Config {
	cfg := inject.DefaultConfig(names, Version)
	cfg.Image = o.SidecarImage
	cfg.ImagePullPolicy = corev1.PullPolicy(o.SidecarImagePullPolicy)
	cfg.ListenPort, cfg.AdminPort = int32(o.SidecarListenPort), int32(o.SidecarAdminPort)
	cfg.DrainTimeout = o.SidecarDrainTimeout
	cfg.RequestMetrics = o.SidecarRequestMetrics
	cfg.Tracing = o.SidecarTracing
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
