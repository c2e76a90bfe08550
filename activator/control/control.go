package control

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/ebb-dev/ebb/activator/proxy"
	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/internal/kubeclient"
	"github.com/ebb-dev/ebb/internal/routing"
)

// Table is what the control loops need of the request path: the routing
// table and each app's endpoints, replaced whole. proxy.Router is one.
type Table interface {
	SetRoutes(routes []routing.Route[proxy.AppConfig], claims routing.Claims)
	SetEndpoints(key routing.Key, eps []proxy.Endpoint)
}

// Config is what the control loops take of the activator's options.
type Config struct {
	Names groupsuffix.Names
	// PodName and PodNamespace are this replica's pod; the Leases, the
	// pools ConfigMap and the instance's activator pods are in PodNamespace.
	PodName, PodNamespace string
	// ActivatorSelector selects the instance's activator pods.
	ActivatorSelector string
	// Pool is this replica's pool; PoolsConfigMap lists every pool (empty:
	// this pool admits every route).
	Pool, PoolsConfigMap string
	// HandoffPort is the port hand-off slices publish; AdminPort is every
	// replica's admin port (GET RoutingPath).
	HandoffPort, AdminPort int
	// SidecarAdminPort is the sidecars' admin port, probed for /ready.
	SidecarAdminPort int
	// Resync is the period of the full re-list of AppRoutes.
	Resync time.Duration
	// ScalerService ("namespace/name:port") is the scaler Service whose
	// ready endpoints OnScalers receives; empty: none.
	ScalerService string
	// LeaderElect: the hand-off and propagation loops run only on the
	// replica that holds its pool's Lease; false: on this replica.
	LeaderElect bool
	// ScaleTargets are the custom workload kinds routed (--scale-targets):
	// the hand-off reads their spec.replicas, and the cache keeps nothing
	// else of them.
	ScaleTargets []schema.GroupResource
}

// Loops are one replica's control loops, in one controller-runtime
// manager: the routing table (every replica), and the hand-off slices and
// Propagated conditions (the pool's elected replica).
type Loops struct {
	mgr  ctrl.Manager
	src  *sources
	lead *leadership // nil without leader election
	// leaderLoops returns new hand-off and propagation controllers, for each
	// term.
	leaderLoops func() ([]manager.Runnable, error)
	log         logr.Logger
}

// New returns the control loops of a replica that feed table. onScalers,
// if not nil, receives the scaler Service's ready addresses whenever they
// change.
func New(rc *rest.Config, c Config, table Table, reg prometheus.Registerer, onScalers func([]string), log logr.Logger) (*Loops, error) {
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes dynamic client: %w", err)
	}
	mgr, err := newManager(rc, c, log)
	if err != nil {
		return nil, err
	}
	handoffSlices := prometheus.NewGauge(prometheus.GaugeOpts{Name: MetricHandoffSlices, Help: "Hand-off EndpointSlices published (on the leader)."})
	reg.MustRegister(handoffSlices)
	src := &sources{cfg: c, names: c.Names, log: log.WithName("routing"), router: table, cache: mgr.GetCache(), api: mgr.GetAPIReader()}
	var last []string
	src.onScalers = func(addrs []string) {
		if onScalers != nil && !slices.Equal(addrs, last) {
			last = addrs
			onScalers(addrs)
		}
	}
	bind := &binder{cfg: c, cache: mgr.GetCache()}
	ho := &handoff{cfg: c, names: c.Names, log: log.WithName("handoff"), kube: kube, src: src, mapper: mgr.GetRESTMapper(), bind: bind, published: handoffSlices}
	prop := &propagation{names: c.Names, log: log.WithName("propagation"), dyn: dyn, src: src, bind: bind, pool: c.Pool, adminPort: c.AdminPort, client: &http.Client{Timeout: 2 * time.Second}}
	watched := append([]client.Object{&routingv1alpha1.AppRoute{}, &corev1.Service{}, &discoveryv1.EndpointSlice{}, &appsv1.Deployment{}, &corev1.Pod{}}, poolObjects(c)...)
	l := &Loops{mgr: mgr, src: src, log: log}
	l.leaderLoops = func() ([]manager.Runnable, error) {
		h, err := newLoop(mgr, "handoff", ho, 0, watched...)
		if err != nil {
			return nil, fmt.Errorf("hand-off controller: %w", err)
		}
		p, err := newLoop(mgr, "propagation", prop, propagationDelay, watched...)
		if err != nil {
			return nil, fmt.Errorf("propagation controller: %w", err)
		}
		return []manager.Runnable{h, p}, nil
	}

	tableLoop, err := newLoop(mgr, "routing-table", src, 0, &routingv1alpha1.AppRoute{}, &routingv1alpha1.DomainClaim{}, &corev1.Service{}, &discoveryv1.EndpointSlice{})
	if err != nil {
		return nil, fmt.Errorf("routing-table controller: %w", err)
	}
	if err := mgr.Add(tableLoop); err != nil {
		return nil, fmt.Errorf("routing-table controller: %w", err)
	}
	if c.LeaderElect {
		leaseKube, err := leaseClient(rc)
		if err != nil {
			return nil, err
		}
		l.lead = &leadership{kube: leaseKube, cfg: c, log: log, src: src, changed: make(chan struct{}, 1)}
		if err := ctrl.NewControllerManagedBy(mgr).Named("activator-lease").For(&corev1.Pod{}).
			WithOptions(controller.Options{SkipNameValidation: ptr.To(true)}).Complete(l.lead); err != nil {
			return nil, fmt.Errorf("lease controller: %w", err)
		}
		return l, nil
	}
	loops, err := l.leaderLoops()
	if err != nil {
		return nil, err
	}
	for _, r := range loops {
		if err := mgr.Add(r); err != nil {
			return nil, fmt.Errorf("add %T: %w", r, err)
		}
	}
	return l, nil
}

// MetricHandoffSlices counts the hand-off slices the leader publishes.
const MetricHandoffSlices = "ebb_activator_handoff_slices"

// Run runs the loops until ctx ends; ready is closed once the caches have
// synced and the first routing table has been built (the data port must
// not open before). It returns an error when the caches do not sync in 2
// minutes or the manager stops before ctx ends.
func (l *Loops) Run(ctx context.Context, ready chan<- struct{}) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	mgrCtx, stop := context.WithCancel(ctx)
	defer stop()
	mgrErr := make(chan error, 1)
	wg.Go(func() { mgrErr <- l.mgr.Start(mgrCtx) })

	syncCtx, cancelSync := context.WithTimeout(ctx, 2*time.Minute)
	synced := l.mgr.GetCache().WaitForCacheSync(syncCtx)
	cancelSync()
	if !synced {
		if ctx.Err() != nil {
			return nil
		}
		select {
		case err := <-mgrErr:
			return fmt.Errorf("controller manager: %w", err)
		default:
		}
		return fmt.Errorf("caches of AppRoutes (group %s), Services, EndpointSlices, Deployments and activator pods did not sync in 2m: is the CRD installed and RBAC granted?", l.src.names.Group())
	}
	if _, err := l.src.Reconcile(ctx, everything); err != nil {
		return err
	}
	close(ready)
	if l.lead != nil {
		wg.Go(func() { l.lead.run(mgrCtx, l.leaderLoops) })
	}
	select {
	case <-ctx.Done():
		return nil
	case err := <-mgrErr: // its controllers and cache stopped: the table would go stale
		if err == nil {
			err = errors.New("stopped")
		}
		return fmt.Errorf("controller manager: %w", err)
	}
}

// leaseClient is the pool Lease's client, with a token bucket of its own:
// a burst of the other clients' writes (hand-off slices, Admitted and
// Propagated, cold starts' status) never holds a renewal past its 10 s
// deadline.
func leaseClient(rc *rest.Config) (kubernetes.Interface, error) {
	kube, err := kubernetes.NewForConfig(kubeclient.Separate(rc))
	if err != nil {
		return nil, fmt.Errorf("kubernetes client for the pool Lease: %w", err)
	}
	return kube, nil
}

// Synced reports whether the routing table is fresh: a full list of
// AppRoutes succeeded within three resync periods, and the API server
// answered this replica within the last 30 s.
func (l *Loops) Synced() bool { return l.src.synced() }

// ColdStartWatcher returns the watcher of cold starts' phases on the API
// server, for proxy.RouterOptions.
func ColdStartWatcher(rc *rest.Config, names groupsuffix.Names, log logr.Logger) (proxy.ColdStartWatcher, error) {
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes dynamic client: %w", err)
	}
	hc, err := rest.HTTPClientFor(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes HTTP client: %w", err)
	}
	// Lazy: a kind is looked up at its first cold start, and a kind not
	// found is looked up again at the next.
	mapper, err := apiutil.NewDynamicRESTMapper(rc, hc)
	if err != nil {
		return nil, fmt.Errorf("REST mapper: %w", err)
	}
	return &apiWatcher{kube: kube, dyn: dyn, mapper: mapper, appLabel: names.AppLabel(), log: log}, nil
}

// ColdStartRecorder returns what writes each finished cold start into its
// AppRoute's status.lastColdStart, for proxy.RouterOptions.OnColdStart;
// pod ("namespace/name") is this replica's.
func ColdStartRecorder(rc *rest.Config, names groupsuffix.Names, pod string, log logr.Logger) (func(proxy.ColdStartRecord), error) {
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes dynamic client: %w", err)
	}
	c := &coldStartStatus{names: names, dyn: dyn, pod: pod, log: log}
	return c.record, nil
}

// ParseServiceRef splits "namespace/name:port" (port a number or a name).
func ParseServiceRef(s string) (ns, name, port string, err error) {
	ref, port, ok := strings.Cut(s, ":")
	ns, name, ok2 := strings.Cut(ref, "/")
	if !ok || !ok2 || ns == "" || name == "" || port == "" {
		return "", "", "", fmt.Errorf("%q: want namespace/name:port", s)
	}
	return ns, name, port, nil
}
