package activator

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"

	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ebb-dev/ebb/activator/control"
	"github.com/ebb-dev/ebb/activator/proxy"
	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/internal/holdpush"
	"github.com/ebb-dev/ebb/internal/kubeclient"
	"github.com/ebb-dev/ebb/internal/logroute"
	"github.com/ebb-dev/ebb/internal/procmetrics"
	"github.com/ebb-dev/ebb/internal/reqmetrics"
	"github.com/ebb-dev/ebb/internal/tlsfiles"
	"github.com/ebb-dev/ebb/internal/tracing"
	"github.com/ebb-dev/ebb/internal/workload"
)

// Run serves the activator until ctx ends, then drains (drain): it
// accepts until kube-proxy no longer routes to it, then answers every
// request it took, held ones included, exiting at the latest
// ColdStartTimeout + DrainTimeout after ctx ended. It wires the two
// halves: the request path (package proxy) and the control loops that feed
// it (package control).
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
	kubeclient.Limit(rc, opts.KubeAPIQPS, opts.KubeAPIBurst)
	reg := prometheus.NewRegistry()
	labelled := prometheus.WrapRegistererWith(prometheus.Labels{groupsuffix.MetricLabel: names.Suffix(), control.PoolMetricLabel: opts.Pool}, reg)
	labelled.MustRegister(procmetrics.Collectors()...)

	rp, err := newRequestPath(opts, rc, names, labelled, log)
	if err != nil {
		return err
	}
	defer rp.close()
	loops, err := newControlLoops(opts, rc, names, rp, labelled, log)
	if err != nil {
		return err
	}

	// The control loops run until the drain is over; the first routing
	// table is built before the data port opens.
	runCtx, cancelRun := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancelRun()
	loopsErr := make(chan error, 1)
	tableReady := make(chan struct{})
	wg.Go(func() { loopsErr <- loops.Run(runCtx, tableReady) })
	select {
	case <-tableReady:
	case err := <-loopsErr:
		return err
	case <-ctx.Done():
		return nil
	}

	draining := make(chan struct{})
	srv, err := listen(opts, rp.router, adminHandler(reg, rp.routing, loops, draining))
	if err != nil {
		return err
	}
	log.Info("activator serving", "listen", opts.Listen, "admin", opts.AdminListen, "group", names.Group())

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-srv.errs:
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
	drain{log: log, data: srv.data, accepts: srv.accepts, routed: routed,
		delay: opts.DrainDelay, coldStart: opts.ColdStartTimeout, timeout: opts.DrainTimeout}.run(time.Now())
	srv.admin.Close()
	return runErr
}

// requestPath is the activator's request path and what it tells: the
// Router, the held-count push to the scalers, the tracer.
type requestPath struct {
	router *proxy.Router
	push   *holdpush.Client
	tp     *tracing.Provider

	// routing is router as the control loops feed it, with the version of
	// what it serves: GET control.RoutingPath.
	routing *control.Routing
}

// newRequestPath builds the Router, the push of held counts to the
// scalers (fixed --scaler-addresses, or those the control loops find) and
// the tracer; close releases them.
func newRequestPath(opts Options, rc *rest.Config, names groupsuffix.Names, reg prometheus.Registerer, log logr.Logger) (*requestPath, error) {
	dial, err := scalerDialOptions(opts)
	if err != nil {
		return nil, err
	}
	rp := &requestPath{}
	sent := func(app holdpush.App, held int64, at time.Time) {
		rp.router.ScalerTold(app.Namespace, app.Name, held, at)
	}
	rp.push, err = holdpush.NewClient(holdpush.ClientOptions{Activator: opts.PodNamespace + "/" + opts.PodName, DialOptions: dial, Sent: sent, Log: log.WithName("holdpush")})
	if err != nil {
		return nil, fmt.Errorf("held-count push: %w", err)
	}
	if len(opts.ScalerAddresses) > 0 {
		rp.push.SetAddresses(opts.ScalerAddresses)
	} else if opts.ScalerService == "" {
		log.Info("no --scaler-addresses or --scaler-service: held counts reach no scaler, apps at zero are not woken by this activator")
	}
	// The cold-start watcher and recorder take token buckets of their own:
	// a burst of cold starts' status writes (one each) holds neither the
	// next cold start's watch nor the control loops' hand-off writes and
	// Lease renewals.
	watcher, err := control.ColdStartWatcher(kubeclient.Separate(rc), names, log.WithName("coldstart"))
	if err != nil {
		rp.push.Close()
		return nil, err
	}
	record, err := control.ColdStartRecorder(kubeclient.Separate(rc), names, opts.PodNamespace+"/"+opts.PodName, log.WithName("coldstart"))
	if err != nil {
		rp.push.Close()
		return nil, err
	}
	var requests *reqmetrics.Recorder
	if opts.RequestMetrics {
		requests = reqmetrics.New(reg, reqmetrics.Activator)
	}
	rp.tp = tracing.New(opts.Tracing, "ebb-activator", attribute.String("k8s.pod.name", opts.PodName), attribute.String("k8s.namespace.name", opts.PodNamespace))
	rp.router = proxy.NewRouter(proxy.RouterOptions{
		QueueSize: opts.QueueSize, MaxHeld: opts.MaxHeld, MaxHeldBytes: int64(opts.MaxHeldBytes), ColdStartTimeout: opts.ColdStartTimeout,
		RequestTimeout: opts.RequestTimeout, ResponseHeaderTimeout: opts.ResponseHeaderTimeout, StreamIdleTimeout: opts.StreamIdleTimeout,
		ProbeInterval: opts.ProbeInterval, Pusher: rp.push, Metrics: proxy.NewMetrics(reg), Requests: requests,
		Watcher: watcher, OnColdStart: record, Tracer: rp.tp.Tracer, Log: log.WithName("proxy"),
	})
	rp.routing = control.NewRouting(rp.router, opts.PodName)
	return rp, nil
}

func (rp *requestPath) close() {
	rp.push.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	rp.tp.Shutdown(ctx)
}

// newControlLoops builds the control loops that feed rp's Router and tell
// its push where the scalers are.
func newControlLoops(opts Options, rc *rest.Config, names groupsuffix.Names, rp *requestPath, reg prometheus.Registerer, log logr.Logger) (*control.Loops, error) {
	_, adminPortStr, _ := net.SplitHostPort(opts.AdminListen)
	adminPort, _ := strconv.Atoi(adminPortStr)
	onScalers := func(addrs []string) {
		rp.push.SetAddresses(addrs)
		log.Info("scaler addresses", "addresses", addrs)
	}
	scaleTargets, err := workload.ParseTargets(strings.Join(opts.ScaleTargets, ","))
	if err != nil {
		return nil, fmt.Errorf("--scale-targets: %w", err) // checked by Validate
	}
	return control.New(rc, control.Config{
		Names: names, PodName: opts.PodName, PodNamespace: opts.PodNamespace, ActivatorSelector: opts.ActivatorSelector,
		Pool: opts.Pool, PoolsConfigMap: opts.PoolsConfigMap, HandoffPort: opts.HandoffPort, AdminPort: adminPort,
		SidecarAdminPort: opts.SidecarAdminPort, Resync: opts.Resync, ScalerService: opts.ScalerService, LeaderElect: opts.LeaderElect,
		ScaleTargets: scaleTargets,
	}, rp.routing, reg, onScalers, log)
}

// servers are the data and admin ports, serving; errs receives the error
// of either that stops.
type servers struct {
	data    *proxy.Server
	accepts *acceptClock // the data port's listener, which notes each accept
	admin   *http.Server
	errs    chan error
}

// listen opens the data port (HTTP/1.1 through the engine, h2c and the
// rest through net/http) and the admin port, and serves them.
func listen(opts Options, router *proxy.Router, adminHandler http.Handler) (*servers, error) {
	data := &http.Server{Addr: opts.Listen, Handler: router, ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 64 << 10, IdleTimeout: 120 * time.Second}
	data.Protocols = new(http.Protocols)
	data.Protocols.SetHTTP1(true)
	data.Protocols.SetUnencryptedHTTP2(true)
	dataLn, err := net.Listen("tcp", opts.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", opts.Listen, err)
	}
	adminLn, err := net.Listen("tcp", opts.AdminListen)
	if err != nil {
		dataLn.Close()
		return nil, fmt.Errorf("listen on %s: %w", opts.AdminListen, err)
	}
	s := &servers{
		data:    proxy.NewServer(router, data),
		accepts: &acceptClock{Listener: dataLn},
		admin:   &http.Server{Addr: opts.AdminListen, Handler: adminHandler, ReadHeaderTimeout: 10 * time.Second},
		errs:    make(chan error, 2),
	}
	go func() { s.errs <- serveData(s.data, s.accepts) }()
	go func() { s.errs <- serve(s.admin, adminLn, "admin") }()
	return s, nil
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

func adminHandler(reg *prometheus.Registry, routing http.Handler, loops *control.Loops, draining <-chan struct{}) http.Handler {
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
			http.Error(w, "routing table not synced within 3 resync periods, or the API server silent for 30s", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ready\n"))
	})
	mux.Handle("GET "+control.RoutingPath, routing)
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
