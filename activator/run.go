package activator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ebb-dev/ebb/activator/control"
	"github.com/ebb-dev/ebb/activator/proxy"
	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/internal/holdpush"
	"github.com/ebb-dev/ebb/internal/kubeclient"
	"github.com/ebb-dev/ebb/internal/logroute"
	"github.com/ebb-dev/ebb/internal/reqmetrics"
	"github.com/ebb-dev/ebb/internal/tlsfiles"
	"github.com/ebb-dev/ebb/internal/tracing"
)

// Run serves the activator until ctx ends, then drains (drain): it
// accepts until kube-proxy no longer routes to it, then answers every
// request it took, held ones included, exiting at the latest
// ColdStartTimeout + DrainTimeout after ctx ended. It wires the two halves: the request
// path (package proxy) and the control loops that feed it (package
// control).
func Run(ctx context.Context, opts Options) error {
	if err := opts.Validate(); err != nil {
		return err
	}
	names := groupsuffix.MustNew(opts.GroupSuffix)
	log := logroute.Setup("ebb-activator", opts.Log).WithValues("pod", opts.PodName, "groupSuffix", names.Suffix(), "pool", opts.Pool)

	rc, err := kubeclient.Config(opts.Kubeconfig)
	if err != nil {
		return err
	}
	rc.UserAgent = "ebb-activator"
	rc.QPS, rc.Burst = 50, 100

	reg := prometheus.NewRegistry()
	labelled := prometheus.WrapRegistererWith(prometheus.Labels{groupsuffix.MetricLabel: names.Suffix(), control.PoolMetricLabel: opts.Pool}, reg)
	labelled.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	dial, err := scalerDialOptions(opts)
	if err != nil {
		return err
	}
	var router *proxy.Router
	sent := func(app holdpush.App, held int64, at time.Time) { router.ScalerTold(app.Namespace, app.Name, held, at) }
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
	watcher, err := control.ColdStartWatcher(rc, names, log.WithName("coldstart"))
	if err != nil {
		return err
	}
	record, err := control.ColdStartRecorder(rc, names, opts.PodNamespace+"/"+opts.PodName, log.WithName("coldstart"))
	if err != nil {
		return err
	}
	router = proxy.NewRouter(proxy.RouterOptions{
		QueueSize: opts.QueueSize, MaxHeld: opts.MaxHeld, ColdStartTimeout: opts.ColdStartTimeout,
		ProbeInterval: opts.ProbeInterval, Pusher: push, Metrics: proxy.NewMetrics(labelled), Requests: requests,
		Watcher: watcher, OnColdStart: record, Tracer: tp.Tracer, Log: log.WithName("proxy"),
	})

	_, adminPortStr, _ := net.SplitHostPort(opts.AdminListen)
	adminPort, _ := strconv.Atoi(adminPortStr)
	onScalers := func(addrs []string) {
		push.SetAddresses(addrs)
		log.Info("scaler addresses", "addresses", addrs)
	}
	loops, err := control.New(rc, control.Config{
		Names: names, PodName: opts.PodName, PodNamespace: opts.PodNamespace, ActivatorSelector: opts.ActivatorSelector,
		Pool: opts.Pool, PoolsConfigMap: opts.PoolsConfigMap, HandoffPort: opts.HandoffPort, AdminPort: adminPort,
		SidecarAdminPort: opts.SidecarAdminPort, Resync: opts.Resync, ScalerService: opts.ScalerService, LeaderElect: opts.LeaderElect,
	}, router, labelled, onScalers, log)
	if err != nil {
		return err
	}

	runCtx, cancelRun := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRun()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancelRun()
	loopsErr := make(chan error, 1)
	tableReady := make(chan struct{})
	wg.Go(func() { loopsErr <- loops.Run(runCtx, tableReady) })
	// The first table is built before the data port opens.
	select {
	case <-tableReady:
	case err := <-loopsErr:
		return err
	case <-ctx.Done():
		return nil
	}
	draining := make(chan struct{})
	admin := &http.Server{Addr: opts.AdminListen, Handler: adminHandler(reg, router, loops, opts.PodName, draining), ReadHeaderTimeout: 10 * time.Second}
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
	dataSrv := proxy.NewServer(router, data)
	accepts := &acceptClock{Listener: dataLn}
	go func() { serveErr <- serveData(dataSrv, accepts) }()
	go func() { serveErr <- serve(admin, adminLn, "admin") }()
	log.Info("activator serving", "listen", opts.Listen, "admin", opts.AdminListen, "group", names.Group())

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-serveErr:
	case runErr = <-loopsErr: // the table would go stale
	}
	close(draining)
	routed := func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return loops.HandoffLists(ctx, opts.PodIP)
	}
	if runErr != nil { // the routing table would go stale: no longer trusted
		routed = func() bool { return false }
	}
	drain{log: log, data: dataSrv, accepts: accepts, routed: routed,
		delay: opts.DrainDelay, coldStart: opts.ColdStartTimeout, timeout: opts.DrainTimeout}.run(time.Now())
	admin.Close()
	return runErr
}

func serveData(s *proxy.Server, ln net.Listener) error {
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

func adminHandler(reg *prometheus.Registry, router *proxy.Router, loops *control.Loops, pod string, draining <-chan struct{}) http.Handler {
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
		if !loops.Synced() {
			http.Error(w, "routing table not synced within 3 resync periods", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ready\n"))
	})
	mux.HandleFunc("GET "+control.RoutingPath, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(control.Served{Pod: pod, Routes: router.Served()})
	})
	return mux
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
