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
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/internal/holdpush"
	"github.com/ebb-dev/ebb/internal/kubeclient"
	"github.com/ebb-dev/ebb/internal/logging"
	"github.com/ebb-dev/ebb/internal/logroute"
)

// Run serves the activator until ctx ends, then drains held and proxied
// requests for up to DrainTimeout.
func Run(ctx context.Context, opts Options) error {
	if err := opts.Validate(); err != nil {
		return err
	}
	names := groupsuffix.MustNew(opts.APIGroupSuffix)
	log := newLogger(opts).WithValues("pod", opts.PodName, "groupSuffix", names.Suffix())

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
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := NewMetrics(reg)

	push, err := holdpush.NewClient(holdpush.ClientOptions{Activator: opts.PodNamespace + "/" + opts.PodName, Log: log.WithName("holdpush")})
	if err != nil {
		return fmt.Errorf("held-count push: %w", err)
	}
	defer push.Close()
	if len(opts.ScalerAddresses) > 0 {
		push.SetAddresses(opts.ScalerAddresses)
	} else if opts.ScalerService == "" {
		log.Info("no --scaler-addresses or --scaler-service: held counts reach no scaler, apps at zero are not woken by this activator")
	}

	dp := NewRouter(RouterOptions{
		QueueSize: opts.QueueSize, MaxHeld: opts.MaxHeld, ColdStartTimeout: opts.ColdStartTimeout,
		ProbeInterval: opts.ProbeInterval, Pusher: push, Metrics: metrics, Log: log.WithName("dataplane"),
	})

	factory := informers.NewSharedInformerFactory(kube, 10*time.Minute)
	dynFactory := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 10*time.Minute)
	routeInf := dynFactory.ForResource(routingv1alpha1.GroupVersionResource(names.Group())).Informer()
	src, err := newSources(opts, names, log.WithName("routing"), kube, dyn, factory, routeInf, dp)
	if err != nil {
		return err
	}
	var lastScalers []string
	src.onScalers = func(addrs []string) {
		if fmt.Sprint(addrs) != fmt.Sprint(lastScalers) {
			lastScalers = addrs
			push.SetAddresses(addrs)
			log.Info("scaler addresses", "addresses", addrs)
		}
	}
	deployments := factory.Apps().V1().Deployments().Informer()
	activatorFactory := informers.NewSharedInformerFactoryWithOptions(kube, 10*time.Minute, informers.WithNamespace(opts.PodNamespace),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = opts.ActivatorSelector }))
	activators := activatorFactory.Core().V1().Pods().Informer()

	_, adminPortStr, _ := net.SplitHostPort(opts.AdminListen)
	adminPort, _ := strconv.Atoi(adminPortStr)
	ho := &handoff{opts: opts, names: names, log: log.WithName("handoff"), kube: kube, src: src, deployments: deployments, activators: activators, metrics: metrics, kick: make(chan struct{}, 1)}
	prop := &propagation{names: names, log: log.WithName("propagation"), dyn: dyn, src: src, activators: activators, adminPort: adminPort,
		client: &http.Client{Timeout: 2 * time.Second}, kick: make(chan struct{}, 1)}
	kickLeader := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { ho.trigger(); prop.trigger() },
		UpdateFunc: func(any, any) { ho.trigger(); prop.trigger() },
		DeleteFunc: func(any) { ho.trigger(); prop.trigger() },
	}
	for _, inf := range []cache.SharedIndexInformer{routeInf, src.services, src.slices, deployments, activators} {
		if _, err := inf.AddEventHandler(kickLeader); err != nil {
			return fmt.Errorf("watch: %w", err)
		}
	}

	runCtx, cancelRun := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRun()
	factory.Start(runCtx.Done())
	dynFactory.Start(runCtx.Done())
	activatorFactory.Start(runCtx.Done())
	syncCtx, cancelSync := context.WithTimeout(ctx, 2*time.Minute)
	synced := cache.WaitForCacheSync(syncCtx.Done(), routeInf.HasSynced, src.services.HasSynced, src.slices.HasSynced, deployments.HasSynced, activators.HasSynced)
	cancelSync()
	if !synced {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("caches of AppRoutes (group %s), Services, EndpointSlices, Deployments and activator pods did not sync in 2m: is the CRD installed and RBAC granted?", names.Group())
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancelRun()
	// The first table is built before the periodic resync starts, so the two
	// never run at once (onScalers and the table swap are single-writer).
	src.rebuild(src.cachedRoutes())
	wg.Go(func() { src.run(runCtx) })

	var draining = make(chan struct{})
	admin := &http.Server{Addr: opts.AdminListen, Handler: adminHandler(reg, dp, src, opts.PodName, draining), ReadHeaderTimeout: 10 * time.Second}
	data := &http.Server{Addr: opts.Listen, Handler: dp, ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 64 << 10, IdleTimeout: 120 * time.Second}
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
	dataSrv := NewServer(dp, data)
	go func() { serveErr <- serveData(dataSrv, dataLn) }()
	go func() { serveErr <- serve(admin, adminLn, "admin") }()

	if opts.LeaderElection {
		l := &leadership{kube: kube, opts: opts, names: names, log: log, activators: activators, retry: make(chan struct{}, 1)}
		if _, err := activators.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { l.releaseIfHolderCannotServe(runCtx, obj, false) },
			UpdateFunc: func(_, obj any) { l.releaseIfHolderCannotServe(runCtx, obj, false) },
			DeleteFunc: func(obj any) { l.releaseIfHolderCannotServe(runCtx, obj, true) },
		}); err != nil {
			return fmt.Errorf("watch activator pods: %w", err)
		}
		wg.Go(func() { l.run(runCtx, ho, prop) })
	} else {
		wg.Go(func() { ho.run(runCtx) })
		wg.Go(func() { prop.run(runCtx) })
	}
	log.Info("activator serving", "listen", opts.Listen, "admin", opts.AdminListen, "group", names.Group())

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-serveErr:
	}
	close(draining)
	shutCtx, cancel := context.WithTimeout(context.Background(), opts.DrainTimeout)
	defer cancel()
	if err := dataSrv.Shutdown(shutCtx); err != nil {
		dataSrv.Close()
	}
	dp.Shutdown(shutCtx) // held HTTP/1.x connections are hijacked: data.Shutdown does not wait for them
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
	kube       kubernetes.Interface
	opts       Options
	names      groupsuffix.Names
	log        logr.Logger
	activators cache.SharedIndexInformer
	retry      chan struct{} // a holder was released: campaign again now
	leading    atomic.Bool
}

// readyPoll is how often a replica looks at its own pod's readiness (in its
// informer's cache) while it waits to campaign or leads.
const readyPoll = 100 * time.Millisecond

// run campaigns while the replica is ready, runs the hand-off and
// propagation controllers while it holds the Lease, until ctx ends.
func (l *leadership) run(ctx context.Context, ho *handoff, prop *propagation) {
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: l.opts.PodNamespace, Name: l.names.ClusterScopedName("activator")},
		Client:     l.kube.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: l.opts.PodName},
	}
	tick := time.NewTicker(readyPoll)
	defer tick.Stop()
	for ctx.Err() == nil {
		if !l.selfReady() {
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
			ReleaseOnCancel: true, Name: l.names.ClusterScopedName("activator"),
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(ctx context.Context) {
					l.leading.Store(true)
					l.log.Info("elected: running the endpoint hand-off and propagation controllers")
					var wg sync.WaitGroup
					wg.Go(func() { ho.run(ctx) })
					wg.Go(func() { prop.run(ctx) })
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
					if !l.selfReady() {
						if l.leading.Load() {
							l.log.Info("this replica is not ready: stepping down")
						}
						return
					}
				}
			}
		}()
		le.Run(campaign)
		stop()
	}
}

// selfReady reports whether this replica's pod is Ready; a replica that
// does not find its pod (not run in one) counts as ready.
func (l *leadership) selfReady() bool {
	o, ok, _ := l.activators.GetStore().GetByKey(l.opts.PodNamespace + "/" + l.opts.PodName)
	if !ok {
		return true
	}
	p, ok := o.(*corev1.Pod)
	return ok && podReady(p) && p.DeletionTimestamp == nil
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
	name := names.ClusterScopedName("activator")
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

func adminHandler(reg *prometheus.Registry, dp *Router, src *sources, pod string, draining <-chan struct{}) http.Handler {
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
		json.NewEncoder(w).Encode(Served{Pod: pod, Routes: dp.Served()})
	})
	return mux
}

func newLogger(o Options) logr.Logger {
	log := logging.New(os.Stderr, "ebb-activator", o.Log)
	logroute.All(log, o.Log.Debug())
	return log
}
