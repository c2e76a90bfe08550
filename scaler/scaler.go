package scaler

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/internal/holdpush"
	"github.com/ebb-dev/ebb/internal/kubeclient"
	"github.com/ebb-dev/ebb/internal/logroute"
	"github.com/ebb-dev/ebb/internal/tlsfiles"
)

// Scaler is one ebb-scaler: its listeners are bound by New, Run serves.
type Scaler struct {
	opts       Options
	log        logr.Logger
	names      groupsuffix.Names
	client     kubernetes.Interface
	routes     *routeCheck
	appRoutes  *routes // nil without an API server
	refusals   *refusals
	asked      asked              // what ScaledObjects asked, per app
	idle       *idleStatus        // nil without an API server
	scaledObjs *scaledObjectCache // nil without an API server

	reg       *registry
	hold      *holdpush.Server
	dialer    *net.Dialer
	slowSlots chan struct{}  // the slow lane's reads under way (readSlow)
	slowReads sync.WaitGroup // the slow lane's reads, waited for before the connections close
	podEvents *podEvents
	metrics   *metrics
	prom      *prometheus.Registry

	grpc     *grpc.Server
	health   *health.Server
	admin    *http.Server
	grpcLis  net.Listener
	adminLis net.Listener

	ready         atomic.Bool
	firstTick     atomic.Int64           // unix nanos of the first tick: the start of counting
	acc           map[*app]*appAcc       // tick-owned scratch
	manualTicks   bool                   // tests: only the first tick runs by itself
	stopInformers atomic.Pointer[func()] // set by discover, called on shutdown
}

// Run runs the scaler until ctx ends.
func Run(ctx context.Context, opts Options) error {
	s, err := New(opts)
	if err != nil {
		return err
	}
	return s.Run(ctx)
}

// New validates opts, builds the Kubernetes client and binds both listeners
// (so an address like 127.0.0.1:0 is known through GRPCAddr and AdminAddr
// before Run).
func New(opts Options) (*Scaler, error) {
	opts.Complete()
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("options: %w", err)
	}
	s := &Scaler{opts: opts, reg: newRegistry(), names: groupsuffix.MustNew(opts.GroupSuffix), prom: prometheus.NewRegistry()}
	s.log = newLogger(opts)
	client, dyn, err := kubeClients(opts)
	if err != nil {
		return nil, err
	}
	s.client = client
	if dyn != nil {
		s.appRoutes = newRoutes(dyn, s.names)
		s.idle = newIdleStatus(s, dyn, s.appRoutes, s.names, s.log.WithName("idle"))
		s.scaledObjs = newScaledObjectCache(dyn)
	}
	s.routes = newRouteCheck(s.appRoutes, s.names, s.log.WithName("routes"))
	s.refusals = newRefusals(client, dyn, s.log.WithName("refusals"))
	s.dialer = &net.Dialer{Timeout: opts.ReadTimeout, KeepAlive: 30 * time.Second}
	s.slowSlots = make(chan struct{}, opts.ReadParallelism)
	s.podEvents = newPodEvents(client, s.log.WithName("events"))
	s.metrics = newMetrics(prometheus.WrapRegistererWith(prometheus.Labels{groupsuffix.MetricLabel: opts.GroupSuffix}, s.prom), s)
	s.hold = holdpush.NewServer(holdpush.ServerOptions{
		OnChange:   func(a holdpush.App, n int64) { s.reg.setHeld(a, n, time.Now()) },
		OnDrop:     func(string, int) { s.metrics.activatorDropped.Inc() },
		Grace:      opts.HoldGrace,
		StaleAfter: opts.HoldStaleAfter,
		Log:        s.log.WithName("holdpush"),
	})

	serverOpts := []grpc.ServerOption{
		// Find dead peers (KEDA, activators) within seconds, so a vanished
		// activator's counts are dropped and its stream's goroutines freed.
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 10 * time.Second, Timeout: 5 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
	}
	var adminTLS *tls.Config
	if opts.TLSCertFile != "" {
		// gRPC: a client certificate is required when a CA is given (KEDA's
		// tlsClientCert, the activators' --scaler-cert-file). The admin
		// port: TLS too, a client certificate verified when given and
		// required for /apps only, so probes and Prometheus need none.
		grpcTLS, err := tlsfiles.Server(opts.TLSCertFile, opts.TLSKeyFile, opts.TLSClientCAFile, tls.RequireAndVerifyClientCert)
		if err != nil {
			return nil, fmt.Errorf("gRPC TLS: %w", err)
		}
		serverOpts = append(serverOpts, grpc.Creds(credentials.NewTLS(grpcTLS)))
		if adminTLS, err = tlsfiles.Server(opts.TLSCertFile, opts.TLSKeyFile, opts.TLSClientCAFile, tls.VerifyClientCertIfGiven); err != nil {
			return nil, fmt.Errorf("admin TLS: %w", err)
		}
	}
	s.grpc = grpc.NewServer(serverOpts...)
	externalscaler.RegisterExternalScalerServer(s.grpc, &service{s: s})
	s.health = health.NewServer()
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	s.health.SetServingStatus(externalscaler.ExternalScaler_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(s.grpc, s.health)
	s.hold.Register(s.grpc)
	s.admin = &http.Server{Handler: s.adminHandler(opts.TLSClientCAFile != ""), ReadHeaderTimeout: 5 * time.Second}

	if s.grpcLis, err = net.Listen("tcp", opts.GRPCAddr); err != nil {
		return nil, fmt.Errorf("listen on --grpc-addr: %w", err)
	}
	if s.adminLis, err = net.Listen("tcp", opts.AdminAddr); err != nil {
		s.grpcLis.Close()
		return nil, fmt.Errorf("listen on --admin-addr: %w", err)
	}
	if adminTLS != nil {
		s.adminLis = tls.NewListener(s.adminLis, adminTLS)
	}
	return s, nil
}

// GRPCAddr is the bound gRPC address.
func (s *Scaler) GRPCAddr() net.Addr { return s.grpcLis.Addr() }

// AdminAddr is the bound HTTP address of /metrics, /apps, /healthz, /readyz.
func (s *Scaler) AdminAddr() net.Addr { return s.adminLis.Addr() }

// Ready reports whether the first tick is done (ExternalScaler calls answer
// Unavailable until then).
func (s *Scaler) Ready() bool { return s.ready.Load() }

// Run discovers pods, reads them every tick and serves until ctx ends. The
// gRPC server takes activator pushes from the start; KEDA's calls are
// answered once the first tick has read every sidecar.
func (s *Scaler) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer s.hold.Close()
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := s.grpc.Serve(s.grpcLis); err != nil {
			return fmt.Errorf("serve gRPC: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		if err := s.admin.Serve(s.adminLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve admin HTTP: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		s.health.Shutdown()
		stopped := make(chan struct{})
		go func() { s.grpc.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(5 * time.Second):
			s.grpc.Stop() // StreamIsActive streams end only when KEDA hangs up
		}
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		_ = s.admin.Shutdown(sctx)
		if stop := s.stopInformers.Load(); stop != nil {
			(*stop)()
		}
		return nil
	})
	if s.appRoutes != nil {
		go s.appRoutes.run(gctx)
	}
	if s.scaledObjs != nil {
		go s.scaledObjs.run(gctx)
	}
	g.Go(func() error {
		if err := s.discover(gctx, s.client); err != nil {
			if gctx.Err() != nil {
				return nil
			}
			return err
		}
		if s.idle != nil {
			go s.idle.run(gctx)
		}
		go s.podEvents.run(gctx)
		s.log.Info("serving", "grpc", s.GRPCAddr().String(), "admin", s.AdminAddr().String(), "groupSuffix", s.names.Suffix(), "tick", s.opts.Tick)
		s.loop(gctx)
		return nil
	})
	err := g.Wait()
	s.slowReads.Wait() // each ends within --read-timeout
	s.reg.closeAll()
	return err
}

func (s *Scaler) loop(ctx context.Context) {
	s.tick(ctx)
	s.ready.Store(true)
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(externalscaler.ExternalScaler_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	if s.manualTicks {
		return
	}
	t := time.NewTicker(s.opts.Tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.tick(ctx)
		}
	}
}

// adminHandler serves /metrics, /healthz, /readyz and /apps; with
// clientCerts, /apps only to clients that presented a certificate the
// scaler verified (per-app figures name every app of the cluster).
func (s *Scaler) adminHandler(clientCerts bool) http.Handler {
	guard := func(h http.HandlerFunc) http.HandlerFunc {
		if !clientCerts {
			return h
		}
		return func(w http.ResponseWriter, r *http.Request) {
			if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
				http.Error(w, "/apps needs a client certificate signed by the scaler's --tls-client-ca-file", http.StatusUnauthorized)
				return
			}
			h(w, r)
		}
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.prom, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !s.ready.Load() {
			http.Error(w, "first read of every sidecar not done yet", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /apps", guard(func(w http.ResponseWriter, r *http.Request) {
		window, ok := s.statusWindow(w, r)
		if !ok {
			return
		}
		writeJSON(w, StatusResponse{Ready: s.ready.Load(), Apps: s.appStatuses(time.Now(), window), Activators: s.hold.Activators()})
	}))
	mux.HandleFunc("GET /apps/{namespace}/{app}", guard(func(w http.ResponseWriter, r *http.Request) {
		window, ok := s.statusWindow(w, r)
		if !ok {
			return
		}
		k := appKey{Namespace: r.PathValue("namespace"), Name: r.PathValue("app")}
		a := s.reg.lookup(k)
		if a == nil {
			http.Error(w, fmt.Sprintf("app %s has no pod, nothing held and nothing counted within --max-rate-window", k), http.StatusNotFound)
			return
		}
		now := time.Now()
		writeJSON(w, s.appStatus(k, a.figures(now, window), now, window))
	}))
	return mux
}

// StatusResponse is the body of GET /apps.
type StatusResponse struct {
	Ready      bool                       `json:"ready"`
	Apps       []AppStatus                `json:"apps"`
	Activators []holdpush.ActivatorStatus `json:"activators"`
}

func (s *Scaler) statusWindow(w http.ResponseWriter, r *http.Request) (time.Duration, bool) {
	v := r.URL.Query().Get("window")
	if v == "" {
		return DefaultRateWindow, true
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < s.opts.Tick || d > s.opts.MaxRateWindow {
		http.Error(w, fmt.Sprintf("window=%q: set a duration between %s and %s", v, s.opts.Tick, s.opts.MaxRateWindow), http.StatusBadRequest)
		return 0, false
	}
	return d, true
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v) // the client went away: nothing to do
}

// newLogger returns o.Logger if set (tests), else the binary's logger.
func newLogger(o Options) logr.Logger {
	if o.Logger != nil {
		return *o.Logger
	}
	return logroute.Setup("ebb-scaler", o.Log)
}

// kubeClients returns the client for pods and, unless o.Client is given
// (tests with a fake clientset), one for AppRoutes.
func kubeClients(o Options) (kubernetes.Interface, dynamic.Interface, error) {
	if o.Client != nil {
		return o.Client, nil, nil
	}
	cfg := o.RestConfig
	if cfg == nil {
		var err error
		if cfg, err = kubeclient.Config(o.Kubeconfig); err != nil {
			return nil, nil, err
		}
	}
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "ebb-scaler"
	kubeclient.Limit(cfg, o.KubeAPIQPS, o.KubeAPIBurst)

	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes dynamic client: %w", err)
	}
	return client, dyn, nil
}
