package webhook

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	crwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/internal/kubeclient"
	"github.com/ebb-dev/ebb/internal/logroute"
	"github.com/ebb-dev/ebb/internal/procmetrics"
	"github.com/ebb-dev/ebb/internal/workload"
	"github.com/ebb-dev/ebb/webhook/selfsigned"
)

// Run serves the admission webhook and runs the AppRoute controller until
// ctx is done. It validates opts first.
func Run(ctx context.Context, opts Options) error {
	if err := opts.Validate(); err != nil {
		return fmt.Errorf("invalid options:\n%w", err)
	}
	names := groupsuffix.MustNew(opts.GroupSuffix) // checked by Validate
	log := logroute.Setup("ebb-webhook", opts.Log).WithValues("groupSuffix", names.Suffix())

	restCfg, err := restConfig(opts)
	if err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return fmt.Errorf("build scheme: %w", err)
	}
	if err := routingv1alpha1.AddToScheme(scheme, names.Group()); err != nil {
		return fmt.Errorf("build scheme: %w", err)
	}
	// HTTPRoutes, read when the Gateway API is installed (optionalAPI).
	if err := gatewayv1.Install(scheme); err != nil {
		return fmt.Errorf("build scheme: %w", err)
	}

	if opts.TLSMode == TLSSelfSigned {
		if err := ensureSelfSigned(ctx, restCfg, scheme, names, opts); err != nil {
			return err
		}
	}

	// The manager serves controller-runtime's registry: the same process
	// series as every binary, not all of runtime/metrics.
	if err := procmetrics.ReplaceControllerRuntime(ctrlmetrics.Registry); err != nil {
		return err
	}
	gw := newGatewayAPI()
	targets, err := workload.ParseTargets(strings.Join(opts.ScaleTargets, ","))
	if err != nil {
		return fmt.Errorf("--scale-targets: %w", err)
	}
	custom := newScaleTargetAPIs(targets)
	apis := optionalAPIs{gw}
	for _, k := range custom {
		apis = append(apis, k.api)
	}
	cacheOpts, err := cacheOptions(names, apis, targets)
	if err != nil {
		return fmt.Errorf("cache options: %w", err)
	}
	mgr, err := ctrl.NewManager(restCfg, ctrl.Options{
		Scheme:                        scheme,
		Cache:                         cacheOpts,
		Logger:                        log,
		Metrics:                       metricsserver.Options{BindAddress: opts.MetricsAddr},
		HealthProbeBindAddress:        opts.HealthAddr,
		PprofBindAddress:              opts.PprofAddr,
		LeaderElection:                opts.LeaderElect,
		LeaderElectionID:              names.ClusterScopedName("ebb-webhook"),
		LeaderElectionNamespace:       opts.Namespace,
		LeaderElectionReleaseOnCancel: true,
		// The Lease's renewals take a token bucket of their own: a fleet's
		// AppRoute applies never hold one past leaseRenewDeadline.
		LeaderElectionConfig: kubeclient.Separate(restCfg),
		// The elected replica renews its Lease every leaseRetry: the one
		// write an idle instance makes. See leaseDuration.
		LeaseDuration: ptr.To(leaseDuration),
		RenewDeadline: ptr.To(leaseRenewDeadline),
		RetryPeriod:   ptr.To(leaseRetry),
		WebhookServer: crwebhook.NewServer(crwebhook.Options{
			Host: opts.WebhookHost, Port: opts.WebhookPort,
			CertDir: opts.CertDir, CertName: opts.CertName, KeyName: opts.KeyName,
		}),
	})
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}

	pols := &policies{names: names, client: mgr.GetClient(), api: mgr.GetAPIReader()}
	rts := &routes{names: names, cfg: opts.sidecarConfig(names), client: mgr.GetClient(), cache: mgr.GetCache(), gateway: gw, policies: pols}
	rec := newRouteReconciler(rts, mgr.GetEventRecorder("ebb-webhook"), log.WithName("approute"))
	rec.workloads.custom = custom
	mgr.GetWebhookServer().Register(InjectPath, &admission.Webhook{
		Handler: &podInjector{cfg: rts.cfg, decoder: admission.NewDecoder(scheme), policies: pols, customGroups: groupsOf(targets)},
	})
	mgr.GetWebhookServer().Register(ValidatePolicyPath, &admission.Webhook{Handler: &policyValidator{policies: pols}})
	if err := rec.setup(ctx, mgr); err != nil {
		return fmt.Errorf("set up AppRoute controller: %w", err)
	}
	if opts.TLSMode == TLSSelfSigned {
		if err := mgr.Add(&certRenewer{restCfg: restCfg, scheme: scheme, names: names, opts: opts, log: log.WithName("tls")}); err != nil {
			return fmt.Errorf("add certificate renewer: %w", err)
		}
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return fmt.Errorf("add health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("webhook", mgr.GetWebhookServer().StartedChecker()); err != nil {
		return fmt.Errorf("add ready check: %w", err)
	}
	if err := mgr.AddReadyzCheck("cache", cacheSynced(mgr.GetCache().WaitForCacheSync)); err != nil {
		return fmt.Errorf("add ready check: %w", err)
	}

	log.Info("starting", "webhookPort", opts.WebhookPort, "tlsMode", opts.TLSMode, "sidecarImage", rts.cfg.Image)
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("run manager: %w", err)
	}
	return nil
}

// The AppRoute controller's leader election: the elected replica writes
// its Lease every leaseRetry (4 writes a minute; controller-runtime's
// default, 2 s, made 30), and a replica takes over leaseDuration after the
// leader stopped renewing (at once when it stops cleanly: the Lease is
// released). The leader stops leading when it could not renew for
// leaseRenewDeadline; a last try started just before that ends within
// leaseRetry, 5 s before another replica may take the Lease
// (leaseRenewDeadline + leaseRetry < leaseDuration). Admission does not
// wait on it: every replica serves the webhook; only route updates wait
// for a new leader.
const (
	leaseDuration      = 60 * time.Second
	leaseRenewDeadline = 40 * time.Second
	leaseRetry         = 15 * time.Second
)

func restConfig(opts Options) (*rest.Config, error) {
	if opts.RESTConfig != nil {
		return rest.CopyConfig(opts.RESTConfig), nil
	}
	cfg, err := kubeclient.Config(opts.Kubeconfig)
	if err != nil {
		return nil, err
	}
	kubeclient.Limit(cfg, opts.KubeAPIQPS, opts.KubeAPIBurst)
	return cfg, nil
}

func selfSignedOptions(names groupsuffix.Names, opts Options) selfsigned.Options {
	return selfsigned.Options{
		Namespace: opts.Namespace, SecretName: opts.SecretName,
		CommonName: "ebb-webhook-ca." + names.Suffix(),
		Hosts:      append(selfsigned.ServiceHosts(opts.ServiceName, opts.Namespace), opts.ExtraSANs...),
		CertDir:    opts.CertDir, CertName: opts.CertName, KeyName: opts.KeyName,
		WebhookConfiguration:           ConfigurationName(names),
		ValidatingWebhookConfiguration: ValidatingConfigurationName(names),
	}
}

func ensureSelfSigned(ctx context.Context, restCfg *rest.Config, scheme *runtime.Scheme, names groupsuffix.Names, opts Options) error {
	c, err := client.New(restCfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("create client: %w", err)
	}
	notAfter, err := selfsigned.Ensure(ctx, c, selfSignedOptions(names, opts))
	if err != nil {
		return fmt.Errorf("self-signed certificate: %w", err)
	}
	certExpiry.Set(float64(notAfter.Unix()))
	return nil
}

// certRenewer re-checks the self-signed certificate and the caBundle every
// CertCheckInterval, in every replica (each serves with its own files).
type certRenewer struct {
	restCfg *rest.Config
	scheme  *runtime.Scheme
	names   groupsuffix.Names
	opts    Options
	log     logr.Logger
}

var _ manager.LeaderElectionRunnable = (*certRenewer)(nil)

func (r *certRenewer) NeedLeaderElection() bool { return false }

func (r *certRenewer) Start(ctx context.Context) error {
	t := time.NewTicker(r.opts.CertCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := ensureSelfSigned(ctx, r.restCfg, r.scheme, r.names, r.opts); err != nil {
				r.log.Error(err, "check self-signed certificate; retrying at the next interval")
			}
		}
	}
}

// cacheSynced is the cache's readiness check: ready once every informer
// of the cache has synced, and from then on. An informer added later (the
// HTTPRoute watch, when the Gateway API appears) may never sync, its API
// gone or its list refused, and must not take the webhook's admission out
// of service: admission reads no HTTPRoute, and the controller retries.
func cacheSynced(waitForSync func(context.Context) bool) healthz.Checker {
	var synced atomic.Bool
	return func(req *http.Request) error {
		if synced.Load() {
			return nil
		}
		ctx, cancel := context.WithTimeout(req.Context(), 100*time.Millisecond)
		defer cancel()
		if !waitForSync(ctx) {
			return fmt.Errorf("caches not synced")
		}
		synced.Store(true)
		return nil
	}
}
