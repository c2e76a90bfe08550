package activator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/internal/holdpush"
	"github.com/ebb-dev/ebb/internal/kubeclient"
	"github.com/ebb-dev/ebb/internal/logging"
	"github.com/ebb-dev/ebb/internal/logroute"
	"github.com/ebb-dev/ebb/internal/reqmetrics"
	"github.com/ebb-dev/ebb/internal/tlsfiles"
	"github.com/ebb-dev/ebb/internal/tracing"
)

// Run serves the activator until ctx ends, then drains held and proxied
// requests for up to DrainTimeout.
func Run(ctx context.Context, opts Options) error {
	if err := opts.Validate(); err != nil {
		return err
	}
	names := groupsuffix.MustNew(opts.APIGroupSuffix)
	log := newLogger(opts).WithValues("pod", opts.PodName, "groupSuffix", names.Suffix(), "pool", opts.Pool)

	cfg, err := kubeclient.Config(opts.Kubeconfig)
	if err != nil {
		return err
	}
	cfg.UserAgent = "ebb-activator"
	cfg.QPS, cfg.Burst = 50, 100
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("kubernetes dynamic client: %w", err)
	}

	reg := prometheus.NewRegistry()
	labelled := prometheus.WrapRegistererWith(prometheus.Labels{groupsuffix.MetricLabel: names.Suffix(), PoolMetricLabel: opts.Pool}, reg)
	labelled.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := NewMetrics(labelled)

	dial, err := scalerDialOptions(opts)
	if err != nil {
		return err
	}
	var router *Router
	sent := func(app holdpush.App, held int64, at time.Time) { router.scalerTold(app.Namespace, app.Name, held, at) }
	push, err := holdpush.NewClient(holdpush.ClientOptions{Activator: opts.PodNamespace + "/" + opts.PodName, DialOptions: dial, Sent: sent, Log: log.WithName("holdpush")})
	if err != nil {
		return fmt.Errorf("held-count push: %w", err)
	}
	defer push.Close()
	if len(opts.ScalerAddresses) > 0 {
		push.SetAddresses(opts.ScalerAddresses)
	} else if opts.ScalerService == "" {
		log.Info("no --scaler-addresses or --scaler-service: held counts reach no scaler, apps at zero are not woken by this activator")
	}

	tp := tracing.New(opts.Tracing, "ebb-activator", attribute.String("k8s.pod.name", opts.PodName), attribute.String("k8s.namespace.name", opts.PodNamespace))
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		tp.Shutdown(sctx)
	}()
	var requests *reqmetrics.Recorder
	if opts.RequestMetrics {
		requests = reqmetrics.New(labelled, reqmetrics.Activator)
	}
	coldStarts := &coldStartStatus{names: names, dyn: dyn, pod: opts.PodNamespace + "/" + opts.PodName, log: log.WithName("coldstart")}
	router = NewRouter(RouterOptions{
		QueueSize: opts.QueueSize, MaxHeld: opts.MaxHeld, ColdStartTimeout: opts.ColdStartTimeout,
		ProbeInterval: opts.ProbeInterval, Pusher: push, Metrics: metrics, Requests: requests,
		Watcher:     &apiWatcher{kube: kube, appLabel: names.AppLabel(), log: log.WithName("coldstart")},
		OnColdStart: coldStarts.record, Tracer: tp.Tracer, Log: log.WithName("dataplane"),
	})

	mgr, err := newManager(cfg, opts, names, log)
	if err != nil {
		return err
	}
	src := &sources{opts: opts, names: names, log: log.WithName("routing"), router: router, cache: mgr.GetCache(), api: mgr.GetAPIReader()}
	var lastScalers []string
	src.onScalers = func(addrs []string) {
		if fmt.Sprint(addrs) != fmt.Sprint(lastScalers) {
			lastScalers = addrs
			push.SetAddresses(addrs)
			log.Info("scaler addresses", "addresses", addrs)
		}
	}
	_, adminPortStr, _ := net.SplitHostPort(opts.AdminListen)
	adminPort, _ := strconv.Atoi(adminPortStr)
	bind := &binder{opts: opts, cache: mgr.GetCache()}
	ho := &handoff{opts: opts, names: names, log: log.WithName("handoff"), kube: kube, src: src, bind: bind, metrics: metrics, adminPort: adminPort}
	prop := &propagation{names: names, log: log.WithName("propagation"), dyn: dyn, src: src, bind: bind, pool: opts.Pool, adminPort: adminPort, client: &http.Client{Timeout: 2 * time.Second}}
	// The elected replica's controllers: new ones for each term.
	watched := append([]client.Object{&routingv1alpha1.AppRoute{}, &corev1.Service{}, &discoveryv1.EndpointSlice{}, &appsv1.Deployment{}, &corev1.Pod{}}, poolObjects(opts)...)
	leaderLoops := func() ([]manager.Runnable, error) {
		h, err := newLoop(mgr, "handoff", ho, 0, watched...)
		if err != nil {
			return nil, fmt.Errorf("hand-off controller: %w", err)
		}
		p, err := newLoop(mgr, "propagation", prop, propagationDelay, watched...)
		if err != nil {
			return nil, fmt.Errorf("propagation controller: %w", err)
		}
		return []manager.Runnable{h, p, manager.RunnableFunc(ho.watchPeers)}, nil
	}

	table, err := newLoop(mgr, "routing-table", src, 0, &routingv1alpha1.AppRoute{}, &routingv1alpha1.DomainClaim{}, &corev1.Service{}, &discoveryv1.EndpointSlice{})
	if err != nil {
		return fmt.Errorf("routing-table controller: %w", err)
	}
	if err := mgr.Add(table); err != nil {
		return fmt.Errorf("routing-table controller: %w", err)
	}
	var l *leadership
	if opts.LeaderElect {
		l = &leadership{kube: kube, opts: opts, names: names, log: log, src: src, retry: make(chan struct{}, 1), adminPort: adminPort}
		if err := ctrl.NewControllerManagedBy(mgr).Named("activator-lease").For(&corev1.Pod{}).
			WithOptions(controller.Options{SkipNameValidation: ptr.To(true)}).Complete(l); err != nil {
			return fmt.Errorf("lease controller: %w", err)
		}
	} else {
		loops, err := leaderLoops()
		if err != nil {
			return err
		}
		for _, c := range loops {
			if err := mgr.Add(c); err != nil {
				return fmt.Errorf("add %T: %w", c, err)
			}
		}
	}

	runCtx, cancelRun := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRun()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancelRun()
	mgrErr := make(chan error, 1)
	wg.Go(func() { mgrErr <- mgr.Start(runCtx) })
	syncCtx, cancelSync := context.WithTimeout(ctx, 2*time.Minute)
	synced := mgr.GetCache().WaitForCacheSync(syncCtx)
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
		return fmt.Errorf("caches of AppRoutes (group %s), Services, EndpointSlices, Deployments and activator pods did not sync in 2m: is the CRD installed and RBAC granted?", names.Group())
	}
	// The first table is built before the data port opens.
	if _, err := src.Reconcile(runCtx, everything); err != nil {
		return err
	}
	var draining = make(chan struct{})
	admin := &http.Server{Addr: opts.AdminListen, Handler: adminHandler(reg, router, src, opts.PodName, draining), ReadHeaderTimeout: 10 * time.Second}
	data := &http.Server{Addr: opts.Listen, Handler: router, ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 64 << 10, IdleTimeout: 120 * time.Second}
	data.Protocols = new(http.Protocols)
	data.Protocols.SetHTTP1(true)
	data.Protocols.SetUnencryptedHTTP2(true)
	dataLn, err := net.Listen("tcp", opts.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", opts.Listen, err)
	}
	adminLn, err := net.Listen("tcp", opts.AdminListen)
	if err != nil {
		dataLn.Close()
		return fmt.Errorf("listen on %s: %w", opts.AdminListen, err)
	}
	serveErr := make(chan error, 2)
	dataSrv := NewServer(router, data)
	go func() { serveErr <- serveData(dataSrv, dataLn) }()
	go func() { serveErr <- serve(admin, adminLn, "admin") }()

	if l != nil {
		wg.Go(func() { l.run(runCtx, leaderLoops) })
	}
	log.Info("activator serving", "listen", opts.Listen, "admin", opts.AdminListen, "group", names.Group())

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-serveErr:
	case err := <-mgrErr: // its controllers and cache stopped: the table would go stale
		runErr = fmt.Errorf("controller manager: %w", err)
	}
	close(draining)
	shutCtx, cancel := context.WithTimeout(context.Background(), opts.DrainTimeout)
	defer cancel()
	if err := dataSrv.Shutdown(shutCtx); err != nil {
		dataSrv.Close()
	}
	router.Shutdown(shutCtx) // held HTTP/1.x connections are hijacked: data.Shutdown does not wait for them
	admin.Close()
	return runErr
}

func serveData(s *Server, ln net.Listener) error {
	if err := s.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("data server: %w", err)
	}
	return nil
}

func serve(s *http.Server, ln net.Listener, what string) error {
	if err := s.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("%s server: %w", what, err)
	}
	return nil
}

// leadership elects the replica that writes the hand-off slices and the
// Propagated conditions: one writer at a time, always a replica that can
// serve. A replica campaigns only while its own pod is Ready and steps down
// when it is not; any replica releases the Lease of a holder whose pod is
// gone or not Ready (its process crashed or hangs: the kubelet says so), and
// the others campaign again at once, so a new holder drops the old one from
// every hand-off slice within a few API round trips of the kubelet's report
// instead of a lease duration.
type leadership struct {
	kube    kubernetes.Interface
	opts    Options
	names   groupsuffix.Names
	log     logr.Logger
	src     *sources      // its cache holds this instance's activator pods
	retry   chan struct{} // a holder was released: campaign again now
	leading atomic.Bool
	// adminPort is every replica's admin port; refusals counts the checks
	// in a row that found the holder's refusing connections.
	adminPort int
	refusals  int
}

// readyPoll is how often a replica looks at its own pod's readiness (in its
// informer's cache) while it waits to campaign or leads.
const readyPoll = 100 * time.Millisecond

// run campaigns while the replica is ready, runs the controllers loops
// returns (the hand-off and propagation controllers) while it holds the
// Lease, until ctx ends.
func (l *leadership) run(ctx context.Context, loops func() ([]manager.Runnable, error)) {
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: l.opts.PodNamespace, Name: poolLeaseName(l.names, l.opts.Pool)},
		Client:     l.kube.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: l.opts.PodName},
	}
	tick := time.NewTicker(readyPoll)
	defer tick.Stop()
	for ctx.Err() == nil {
		if !l.selfReady(ctx) {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			continue
		}
		campaign, stop := context.WithCancel(ctx)
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock: lock, LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
			ReleaseOnCancel: true, Name: poolLeaseName(l.names, l.opts.Pool),
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(ctx context.Context) {
					l.leading.Store(true)
					l.log.Info("elected: running the endpoint hand-off and propagation controllers")
					cs, err := loops()
					if err != nil {
						l.log.Error(err, "hand-off and propagation stay off this term")
						<-ctx.Done()
						return
					}
					var wg sync.WaitGroup
					for _, c := range cs {
						wg.Go(func() {
							if err := c.Start(ctx); err != nil && ctx.Err() == nil {
								l.log.Error(err, "controller stopped")
							}
						})
					}
					wg.Wait()
				},
				OnStoppedLeading: func() {
					l.leading.Store(false)
					l.log.Info("no longer the elected replica")
				},
			},
		})
		if err != nil {
			stop()
			l.log.Error(err, "leader election misconfigured; hand-off and propagation stay off")
			return
		}
		go func() {
			defer stop()
			for {
				select {
				case <-campaign.Done():
					return
				case <-l.retry:
					if !l.leading.Load() {
						return // campaign again now: the holder was released
					}
				case <-tick.C:
					if !l.selfReady(ctx) {
						if l.leading.Load() {
							l.log.Info("this replica is not ready: stepping down")
						}
						return
					}
					if !l.leading.Load() && l.holderGone(ctx, le.GetLeader()) &&
						releaseLeaseOf(ctx, l.kube, l.opts, l.names, l.log, le.GetLeader(), "its admin port refuses connections: its process is gone") {
						return // campaign again now
					}
				}
			}
		}()
		le.Run(campaign)
		stop()
	}
}

// holderGone reports whether the Lease holder's process is gone: its
// pod's admin port refused a connection on two checks in a row (a crash
// leaves the pod and its address, with nothing listening). It sees a
// crash before the kubelet's next relist and status write do, and a slow
// or hung holder is left to the kubelet's probes (no refusal).
func (l *leadership) holderGone(ctx context.Context, holder string) bool {
	if holder == "" || holder == l.opts.PodName {
		l.refusals = 0
		return false
	}
	var p corev1.Pod
	if err := l.src.cache.Get(ctx, types.NamespacedName{Namespace: l.opts.PodNamespace, Name: holder}, &p); err != nil || p.Status.PodIP == "" {
		l.refusals = 0
		return false
	}
	if refused(net.JoinHostPort(p.Status.PodIP, strconv.Itoa(l.adminPort))) {
		l.refusals++
	} else {
		l.refusals = 0
	}
	return l.refusals >= 2
}

// refused reports whether a TCP connection to addr is refused (nothing
// listens there); a timeout or success is not.
func refused(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err == nil {
		c.Close()
		return false
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

// selfReady reports whether this replica's pod is Ready; a replica that
// does not find its pod (not run in one) counts as ready.
func (l *leadership) selfReady(ctx context.Context) bool {
	var p corev1.Pod
	if err := l.src.cache.Get(ctx, types.NamespacedName{Namespace: l.opts.PodNamespace, Name: l.opts.PodName}, &p); err != nil {
		return true
	}
	return podReady(&p) && p.DeletionTimestamp == nil
}

// Reconcile sees each activator pod of the instance change or go, and
// releases the Lease when that pod is its holder's and cannot serve.
func (l *leadership) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var p corev1.Pod
	switch err := l.src.cache.Get(ctx, req.NamespacedName, &p); {
	case apierrors.IsNotFound(err):
		l.releaseIfHolderCannotServe(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: req.Namespace, Name: req.Name}}, true)
	case err != nil:
		return reconcile.Result{}, err
	default:
		l.releaseIfHolderCannotServe(ctx, &p, false)
	}
	return reconcile.Result{}, nil
}

// releaseIfHolderCannotServe deletes the instance's Lease when obj is the
// pod of its holder, not this replica, and that pod is deleted or not
// Ready; then it makes this replica campaign again at once. A holder that
// stops gracefully releases the Lease itself.
func (l *leadership) releaseIfHolderCannotServe(ctx context.Context, obj any, deleted bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj, deleted = d.Obj, true
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.Name == l.opts.PodName || (!deleted && podReady(pod) && pod.DeletionTimestamp == nil) {
		return
	}
	why := "its pod is gone"
	if !deleted {
		why = "its pod is not ready"
	}
	if releaseLeaseOf(ctx, l.kube, l.opts, l.names, l.log, pod.Name, why) {
		select {
		case l.retry <- struct{}{}:
		default:
		}
	}
}

// releaseLeaseOf deletes the instance's Lease if holder holds it; it
// reports whether it did.
func releaseLeaseOf(ctx context.Context, kube kubernetes.Interface, opts Options, names groupsuffix.Names, log logr.Logger, holder, why string) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	leases := kube.CoordinationV1().Leases(opts.PodNamespace)
	name := poolLeaseName(names, opts.Pool)
	lease, err := leases.Get(ctx, name, metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != holder {
		return false
	}
	rv := lease.ResourceVersion
	if err := leases.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}}); err != nil {
		if !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			log.Error(err, "release the Lease of a holder that cannot serve", "holder", holder)
		}
		return false
	}
	log.Info("released the Lease of a holder that cannot serve", "holder", holder, "why", why)
	return true
}

func adminHandler(reg *prometheus.Registry, router *Router, src *sources, pod string, draining <-chan struct{}) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		select {
		case <-draining:
			http.Error(w, "draining", http.StatusServiceUnavailable)
			return
		default:
		}
		if !src.synced() {
			http.Error(w, "routing table not synced within 3 resync periods", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ready\n"))
	})
	mux.HandleFunc("GET "+RoutingPath, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(Served{Pod: pod, Routes: router.Served()})
	})
	return mux
}

func newLogger(o Options) logr.Logger {
	log := logging.New(os.Stderr, "ebb-activator", o.Log)
	logroute.All(log, o.Log.Debug())
	return log
}

// newManager returns the controller-runtime manager whose cache and
// controllers every loop of the activator runs in: AppRoutes of the
// instance's group, Services, EndpointSlices and Deployments, and only this
// instance's activator pods. The manager serves no metrics or probes of its
// own (the admin port does) and elects no leader (leadership does).
func newManager(cfg *rest.Config, opts Options, names groupsuffix.Names, log logr.Logger) (ctrl.Manager, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("build scheme: %w", err)
	}
	if err := routingv1alpha1.AddToScheme(scheme, names.Group()); err != nil {
		return nil, fmt.Errorf("build scheme: %w", err)
	}
	sel, err := labels.Parse(opts.ActivatorSelector)
	if err != nil {
		return nil, fmt.Errorf("--activator-selector: %w", err)
	}
	byObject := map[client.Object]crcache.ByObject{
		&corev1.Pod{}: {Namespaces: map[string]crcache.Config{opts.PodNamespace: {}}, Label: sel},
	}
	if opts.PoolsConfigMap != "" {
		byObject[&corev1.ConfigMap{}] = crcache.ByObject{Namespaces: map[string]crcache.Config{opts.PodNamespace: {}},
			Field: fields.OneTermEqualSelector("metadata.name", opts.PoolsConfigMap)}
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Logger:                 log,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache: crcache.Options{
			SyncPeriod: ptr.To(10 * time.Minute),
			ByObject:   byObject,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("controller manager: %w", err)
	}
	ctx := context.Background()
	if err := indexSlicesByService(ctx, mgr); err != nil {
		return nil, fmt.Errorf("index EndpointSlices: %w", err)
	}
	// Informers for every kind a loop reads, so the first cache sync waits
	// for all of them.
	for _, obj := range append([]client.Object{&routingv1alpha1.AppRoute{}, &routingv1alpha1.DomainClaim{}, &corev1.Service{}, &discoveryv1.EndpointSlice{}, &appsv1.Deployment{}, &corev1.Pod{}}, poolObjects(opts)...) {
		if _, err := mgr.GetCache().GetInformer(ctx, obj); err != nil {
			return nil, fmt.Errorf("watch %T: %w", obj, err)
		}
	}
	return mgr, nil
}

// poolObjects are the kinds the pools' binding reads: the pools ConfigMap
// and Namespaces (for namespace selectors), when pools are configured.
func poolObjects(opts Options) []client.Object {
	if opts.PoolsConfigMap == "" {
		return nil
	}
	return []client.Object{&corev1.ConfigMap{}, &corev1.Namespace{}}
}

// scalerDialOptions are the pushes' credentials: TLS with --scaler-ca-file
// (and a client certificate with --scaler-cert-file), else plaintext.
func scalerDialOptions(o Options) ([]grpc.DialOption, error) {
	if o.ScalerCAFile == "" {
		return nil, nil
	}
	cfg, err := tlsfiles.Client(o.ScalerCAFile, o.ScalerCertFile, o.ScalerKeyFile, o.ScalerServerName)
	if err != nil {
		return nil, fmt.Errorf("TLS to the scalers: %w", err)
	}
	return []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(cfg))}, nil
}
