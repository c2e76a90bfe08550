package holdpush

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ebb-dev/ebb/internal/holdpush/holdpushpb"
)

// Defaults of ServerOptions and ClientOptions. Resend is well under
// StaleAfter, so a live activator never looks stale.
const (
	DefaultGrace      = 5 * time.Second
	DefaultStaleAfter = 20 * time.Second
	DefaultResend     = 5 * time.Second
)

// ServerOptions configures a Server.
type ServerOptions struct {
	// OnChange is called with an app's new total across all activators each
	// time it changes. It runs under the server's lock, in order: it must not
	// block or call back into the Server.
	OnChange func(app App, held int64)
	// Grace is how long an activator's counts outlive its last stream, so a
	// reconnecting activator does not flap its apps. Default DefaultGrace.
	Grace time.Duration
	// StaleAfter ends a stream that sent nothing (not even its periodic full
	// resend) for this long: a half-open connection then cannot pin an app
	// active. Default DefaultStaleAfter.
	StaleAfter time.Duration
	// OnDrop, if set, is called (outside the lock) when an activator's counts
	// are dropped because it had no stream for Grace.
	OnDrop func(activator string, apps int)
	Log    logr.Logger
}

// Server is the scaler's side: it sums the counts every activator pushes.
type Server struct {
	opts ServerOptions

	mu         sync.Mutex
	activators map[string]*activatorState
	totals     map[App]int64
	closed     bool
}

type activatorState struct {
	holds   map[App]int64
	streams int
	drop    *time.Timer
	dropGen uint64 // identifies the pending drop; bumped when a stream starts
}

// ActivatorStatus describes one activator as a Server sees it.
type ActivatorStatus struct {
	Activator string `json:"activator"`
	Streams   int    `json:"streams"`
	Apps      int    `json:"apps"`
	Held      int64  `json:"held"`
}

// NewServer returns a Server; mount it with Register.
func NewServer(opts ServerOptions) *Server {
	if opts.Grace <= 0 {
		opts.Grace = DefaultGrace
	}
	if opts.StaleAfter <= 0 {
		opts.StaleAfter = DefaultStaleAfter
	}
	if opts.OnChange == nil {
		opts.OnChange = func(App, int64) {}
	}
	return &Server{opts: opts, activators: map[string]*activatorState{}, totals: map[App]int64{}}
}

// Register mounts the service on a gRPC server.
func (s *Server) Register(r grpc.ServiceRegistrar) {
	holdpushpb.RegisterHoldPushServer(r, pushService{s: s})
}

// Held is the number of requests all activators hold for app.
func (s *Server) Held(app App) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.totals[app]
}

// Activators lists the activators whose counts the server keeps, by name.
func (s *Server) Activators() []ActivatorStatus {
	s.mu.Lock()
	out := make([]ActivatorStatus, 0, len(s.activators))
	for name, a := range s.activators {
		st := ActivatorStatus{Activator: name, Streams: a.streams, Apps: len(a.holds)}
		for _, n := range a.holds {
			st.Held += n
		}
		out = append(out, st)
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Activator < out[j].Activator })
	return out
}

// Close stops pending drop timers. Counts already received stay readable.
func (s *Server) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for _, a := range s.activators {
		if a.drop != nil {
			a.drop.Stop()
		}
	}
}

type recvResult struct {
	b   Batch
	err error
}

func (s *Server) push(ss grpc.ClientStreamingServer[holdpushpb.Batch, holdpushpb.Ack]) error {
	recv := make(chan recvResult, 1)
	go func() {
		for {
			var r recvResult
			w, err := ss.Recv()
			if r.err = err; err == nil {
				r.b = fromWire(w)
			}
			select {
			case recv <- r:
			case <-ss.Context().Done():
				return
			}
			if r.err != nil {
				return
			}
		}
	}()

	stale := time.NewTimer(s.opts.StaleAfter)
	defer stale.Stop()
	var name string
	defer func() {
		if name != "" {
			s.streamEnded(name)
		}
	}()
	for {
		select {
		case <-ss.Context().Done():
			return status.FromContextError(ss.Context().Err()).Err()
		case <-stale.C:
			return status.Errorf(codes.DeadlineExceeded, "holdpush: activator %q sent nothing for %s", name, s.opts.StaleAfter)
		case r := <-recv:
			if errors.Is(r.err, io.EOF) {
				return ss.SendAndClose(&holdpushpb.Ack{})
			}
			if r.err != nil {
				return r.err
			}
			if err := validate(&r.b, name); err != nil {
				return status.Error(codes.InvalidArgument, err.Error())
			}
			if name == "" {
				name = r.b.Activator
				s.streamStarted(name)
			}
			s.apply(name, &r.b)
			stale.Reset(s.opts.StaleAfter)
		}
	}
}

func validate(b *Batch, stream string) error {
	var errs []error
	if b.Activator == "" {
		errs = append(errs, errors.New("batch names no activator: set ClientOptions.Activator to the activator pod's namespace/name"))
	} else if stream != "" && b.Activator != stream {
		errs = append(errs, fmt.Errorf("activator changed within a stream from %q to %q: open one stream per activator", stream, b.Activator))
	}
	for _, h := range b.Holds {
		if h.App.Namespace == "" || h.App.Name == "" {
			errs = append(errs, fmt.Errorf("hold %d for %q: both namespace and app name are required", h.Held, h.App))
		}
		if h.Held < 0 {
			errs = append(errs, fmt.Errorf("hold for %s is %d: held counts cannot be negative", h.App, h.Held))
		}
	}
	return errors.Join(errs...)
}

func (s *Server) streamStarted(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.activators[name]
	if a == nil {
		a = &activatorState{holds: map[App]int64{}}
		s.activators[name] = a
	}
	a.streams++
	a.dropGen++
	if a.drop != nil {
		a.drop.Stop()
		a.drop = nil
	}
}

func (s *Server) streamEnded(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.activators[name]
	if a == nil {
		return
	}
	a.streams--
	if a.streams > 0 || s.closed {
		return
	}
	a.dropGen++
	gen := a.dropGen
	a.drop = time.AfterFunc(s.opts.Grace, func() { s.dropIfIdle(name, gen) })
}

func (s *Server) dropIfIdle(name string, gen uint64) {
	s.mu.Lock()
	a := s.activators[name]
	if a == nil || a.streams > 0 || a.dropGen != gen || s.closed {
		s.mu.Unlock()
		return
	}
	apps := len(a.holds)
	for app := range a.holds {
		s.setLocked(a, app, 0)
	}
	delete(s.activators, name)
	s.mu.Unlock()
	s.opts.Log.Info("dropped the held counts of an activator with no stream", "activator", name, "apps", apps, "grace", s.opts.Grace)
	if s.opts.OnDrop != nil {
		s.opts.OnDrop(name, apps)
	}
}

func (s *Server) apply(name string, b *Batch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.activators[name]
	if b.Full {
		listed := make(map[App]struct{}, len(b.Holds))
		for _, h := range b.Holds {
			listed[h.App] = struct{}{}
		}
		for app := range a.holds {
			if _, ok := listed[app]; !ok {
				s.setLocked(a, app, 0)
			}
		}
	}
	for _, h := range b.Holds {
		s.setLocked(a, h.App, h.Held)
	}
}

func (s *Server) setLocked(a *activatorState, app App, held int64) {
	old := a.holds[app]
	if old == held {
		return
	}
	if held == 0 {
		delete(a.holds, app)
	} else {
		a.holds[app] = held
	}
	total := s.totals[app] + held - old
	if total == 0 {
		delete(s.totals, app)
	} else {
		s.totals[app] = total
	}
	s.opts.OnChange(app, total)
}
