package sidecar

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	h1 "github.com/ebb-dev/ebb/internal/http1"
	"github.com/ebb-dev/ebb/internal/logging"
	"github.com/ebb-dev/ebb/internal/tracing"
)

// Run serves until ctx is cancelled, then drains (see the package doc) and
// returns. It returns an error if opts are invalid or a port cannot be
// bound.
func Run(ctx context.Context, opts Options) error {
	if err := opts.Validate(); err != nil {
		return fmt.Errorf("invalid options: %w", err)
	}
	log := newLogger(opts)
	tp := tracing.New(opts.Tracing, "ebb-sidecar", attribute.String("k8s.pod.name", opts.PodName), attribute.String("k8s.namespace.name", opts.PodNamespace))
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		tp.Shutdown(sctx)
	}()
	s, err := start(opts, log, tp.Tracer)
	if err != nil {
		return err
	}
	return s.run(ctx)
}

// newLogger returns the sidecar's logger, naming its pod. It is
// logging.Setup, not logroute.Setup: routing the libraries' logs would link
// client-go, which the sidecar must not.
func newLogger(o Options) logr.Logger {
	log := logging.Setup("ebb-sidecar", o.Log)
	for _, kv := range [][2]string{{"pod", o.PodName}, {"namespace", o.PodNamespace}, {"podIP", o.PodIP}} {
		if kv[1] != "" {
			log = log.WithValues(kv[0], kv[1])
		}
	}
	return log
}

// server is a started sidecar: ports bound, not yet serving.
type server struct {
	opts    Options
	log     logr.Logger
	p       *proxy
	ln      *net.TCPListener
	adminLn net.Listener
	admin   *http.Server
	// acceptDone is closed when the accept loop has returned.
	acceptDone chan struct{}
}

func start(opts Options, log logr.Logger, tracer trace.Tracer) (*server, error) {
	ln, err := net.Listen("tcp", opts.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen for clients: %w", err)
	}
	adminLn, err := net.Listen("tcp", opts.AdminListen)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("listen for admin: %w", err)
	}
	p := newProxy(opts, log, tracer)
	return &server{
		opts:    opts,
		log:     log,
		p:       p,
		ln:      ln.(*net.TCPListener),
		adminLn: adminLn,
		admin: &http.Server{
			Handler:           p.adminHandler(uint64(time.Now().UnixNano())),
			ReadHeaderTimeout: 5 * time.Second,
			IdleTimeout:       opts.IdleTimeout,
		},
	}, nil
}

func (s *server) run(ctx context.Context) error {
	errc := make(chan error, 2)
	s.acceptDone = make(chan struct{})
	go func() {
		defer close(s.acceptDone)
		if err := s.p.srv.Serve(s.ln); !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("serve clients: %w", err)
		}
	}()
	go func() {
		if err := s.admin.Serve(s.adminLn); !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("admin server: %w", err)
		}
	}()
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go s.p.app.watch(watchCtx)
	janitor := time.NewTicker(h1.UpstreamIdleTimeout / 3)
	defer janitor.Stop()
	s.log.Info("serving", "listen", s.ln.Addr().String(), "upstream", s.opts.Upstream,
		"admin", s.adminLn.Addr().String(), "counting", s.opts.Counting)
	for {
		select {
		case <-ctx.Done():
			return s.drain()
		case now := <-janitor.C:
			s.p.up.CloseIdle(now, h1.UpstreamIdleTimeout)
		case err := <-errc:
			s.ln.Close()
			s.admin.Close()
			s.p.srv.Close()
			return err
		}
	}
}

// drain turns not-ready, serves until nothing is in flight or the drain
// timeout passes, then closes everything.
func (s *server) drain() error {
	p := s.p
	p.draining.Store(true)
	p.beginClosing()
	start := time.Now()
	deadline := start.Add(s.opts.DrainTimeout)
	s.log.Info("draining", "inFlight", p.cnt.inFlight.Load(), "timeout", s.opts.DrainTimeout.String())
	tick := time.NewTicker(5 * time.Millisecond)
	for p.busy() > 0 && time.Now().Before(deadline) {
		<-tick.C
	}
	tick.Stop()
	p.srv.Stop()
	<-s.acceptDone // no connection is added after this
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	p.h2.shutdown(ctx) // GOAWAY, then waits for open streams
	cancel()
	clean := p.srv.Wait(deadline)
	if !clean {
		p.srv.Close()
		p.h2.close()
		p.srv.Wait(time.Now().Add(time.Second))
	}
	p.up.CloseIdle(time.Now(), 0)
	actx, acancel := context.WithTimeout(context.Background(), time.Second)
	s.admin.Shutdown(actx)
	acancel()
	s.log.Info("drained", "took", time.Since(start).String(), "cut", !clean, "inFlight", p.cnt.inFlight.Load())
	return nil
}
