package federation

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/internal/kubeclient"
	"github.com/ebb-dev/ebb/internal/logroute"
	"github.com/ebb-dev/ebb/internal/procmetrics"
)

// Run runs the federation controller until ctx is done. It validates opts
// first.
func Run(ctx context.Context, opts Options) error {
	if err := opts.Validate(); err != nil {
		return fmt.Errorf("invalid options:\n%w", err)
	}
	names := groupsuffix.MustNew(opts.GroupSuffix) // checked by Validate
	log := newLogger(opts).WithValues("groupSuffix", names.Suffix())
	restCfg := opts.RestConfig
	if restCfg == nil {
		var err error
		if restCfg, err = kubeclient.Config(opts.Kubeconfig); err != nil {
			return err
		}
	}
	restCfg = rest.CopyConfig(restCfg)
	kubeclient.Limit(restCfg, opts.KubeAPIQPS, opts.KubeAPIBurst)
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return fmt.Errorf("build scheme: %w", err)
	}
	if err := routingv1alpha1.AddToScheme(scheme, names.Group()); err != nil {
		return fmt.Errorf("build scheme: %w", err)
	}
	// Only the member Secrets are cached, in one namespace: the
	// controller reads no other Secret.
	memberSecrets, err := labels.NewRequirement(names.Key(MemberLabel), selection.Exists, nil)
	if err != nil {
		return fmt.Errorf("member Secret selector: %w", err)
	}
	// The manager serves controller-runtime's registry: the same process
	// series as every binary, not all of runtime/metrics.
	if err := procmetrics.ReplaceControllerRuntime(crmetrics.Registry); err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(restCfg, ctrl.Options{
		Scheme:                        scheme,
		Logger:                        log,
		Metrics:                       metricsserver.Options{BindAddress: opts.MetricsAddr},
		HealthProbeBindAddress:        opts.HealthAddr,
		LeaderElection:                opts.LeaderElect,
		LeaderElectionID:              names.ClusterScopedName("ebb-federation"),
		LeaderElectionNamespace:       opts.Namespace,
		LeaderElectionReleaseOnCancel: true,
		// Its own token bucket: a burst of member writes never holds a
		// Lease renewal past its deadline.
		LeaderElectionConfig: kubeclient.Separate(restCfg),
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&corev1.Secret{}: {Namespaces: map[string]cache.Config{opts.Namespace: {}}, Label: labels.NewSelector().Add(*memberSecrets)},
		}},
	})
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}
	m, err := newMetrics(crmetrics.Registry)
	if err != nil {
		return err
	}
	r := &reconciler{
		client: mgr.GetClient(), names: names, namespace: opts.Namespace, interval: opts.Interval,
		members: &members{byName: map[string]*member{}, timeout: opts.ReadTimeout},
		events:  mgr.GetEventRecorder("ebb-federation"), log: log.WithName("federatedscale"), metrics: m,
		trackers: map[client.ObjectKey]*tracker{},
	}
	if err := r.setup(mgr); err != nil {
		return fmt.Errorf("set up FederatedScale controller: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return fmt.Errorf("add health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return fmt.Errorf("add ready check: %w", err)
	}
	log.Info("starting", "namespace", opts.Namespace, "interval", opts.Interval)
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("run manager: %w", err)
	}
	return nil
}

// newLogger returns opts.Logger if set (tests), else the binary's logger.
func newLogger(opts Options) logr.Logger {
	if opts.Logger != nil {
		return *opts.Logger
	}
	return logroute.Setup("ebb-federation", opts.Log)
}
