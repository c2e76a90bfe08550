package sidecar

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/ebb-dev/ebb/internal/logging"
	"github.com/ebb-dev/ebb/internal/options"
	"github.com/ebb-dev/ebb/internal/readiness"
	"github.com/ebb-dev/ebb/internal/sidecarapi"
	"github.com/ebb-dev/ebb/internal/staticanswer"
	"github.com/ebb-dev/ebb/internal/tracing"
)

// Options configure one sidecar. Fill them with ParseOptions or start from
// DefaultOptions; Run validates them.
type Options struct {
	// Listen is where clients connect (host:port).
	Listen string
	// Upstream is the app's address (host:port).
	Upstream string
	// AdminListen serves /stats, /ready and /metrics (host:port).
	AdminListen string
	// DrainTimeout bounds the drain after the context is cancelled, and the
	// wait of GET /wait-for-drain.
	DrainTimeout time.Duration
	// DrainDelay is the quiet period GET /wait-for-drain waits for: no new
	// request for this long means every Service consumer has moved on.
	DrainDelay time.Duration
	// HeaderTimeout bounds how long a client may take to send a request head.
	HeaderTimeout time.Duration
	// IdleTimeout closes keep-alive connections idle this long and bounds
	// each read or write of a stalled request or response body.
	IdleTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for the app's response head once
	// a request is sent (504 after it); 0 waits as long as the client stays.
	ResponseHeaderTimeout time.Duration
	// MaxHeaderBytes is the largest request head accepted; larger gets 431.
	MaxHeaderBytes int
	// StaticResponses is a JSON array of staticanswer.Rule (set by the
	// webhook from the app's RoutePolicy): the sidecar answers the Always
	// rules itself, and leaves out of the counts the requests an AtZero
	// rule without header conditions matches when they have no body and no
	// upgrade. Empty: none.
	StaticResponses string
	// Concurrency is the most requests (an upgraded connection and an h2c
	// stream each one) the app is given at once; 0: no limit.
	Concurrency int
	// ConcurrencyQueue is how many requests wait, first come first served,
	// beyond Concurrency; past it 503 with Retry-After.
	ConcurrencyQueue int
	// RequestTimeout bounds one exchange from its head received to the end
	// of the response: 504 before the app's response head, the connection
	// closed after it. 0: no limit. An upgraded connection is bounded by
	// StreamIdleTimeout instead, once its 101 is sent.
	RequestTimeout time.Duration
	// StreamIdleTimeout closes both sides of an upgraded connection, or of
	// an exchange whose body is still streaming, once no byte has passed
	// either way for this long (an h2c stream is reset).
	StreamIdleTimeout time.Duration
	// AppReadiness is the app's own readiness check (readiness.Check in its
	// JSON form, from the app container's readiness probe); empty: the app
	// is ready when its port accepts connections.
	AppReadiness string
	// Counting turns the request counters on (the default) or off.
	Counting bool
	// RequestMetrics turns the request-duration histogram and the status
	// counts on (the default) or off.
	RequestMetrics bool
	// Tracing is --otlp-endpoint and --trace-sampling.
	Tracing tracing.Options
	// Instance is the ebb instance (group suffix) that injected the
	// sidecar: the ebb_instance label of its metrics. Empty: no label.
	Instance string
	// Log is --log-level and --log-format.
	Log logging.Options
	// PodName, PodNamespace and PodIP come from the downward API and are
	// used in logs only.
	PodName, PodNamespace, PodIP string
}

// DefaultResponseHeaderTimeout is how long the sidecar waits for the app's
// response head unless told otherwise.
const DefaultResponseHeaderTimeout = 10 * time.Minute

// DefaultStreamIdleTimeout is how long an upgraded connection or a
// streaming exchange may pass no byte either way unless told otherwise.
const DefaultStreamIdleTimeout = time.Hour

// DefaultConcurrencyQueue is how many requests wait beyond --concurrency
// unless told otherwise.
const DefaultConcurrencyQueue = 100

// DefaultOptions returns the options used when neither a flag nor an
// environment variable sets them.
func DefaultOptions() Options {
	return Options{
		Listen:        ":" + strconv.Itoa(sidecarapi.DefaultListenPort),
		Upstream:      "127.0.0.1:8080",
		AdminListen:   ":" + strconv.Itoa(sidecarapi.DefaultAdminPort),
		DrainTimeout:  sidecarapi.DefaultDrainTimeout,
		DrainDelay:    5 * time.Second,
		HeaderTimeout: 10 * time.Second,
		IdleTimeout:   120 * time.Second,
		// Knative's longest revision timeout: generous enough for a slow
		// but live app, a bound for one that never answers.
		ResponseHeaderTimeout: DefaultResponseHeaderTimeout,
		MaxHeaderBytes:        64 << 10,
		ConcurrencyQueue:      DefaultConcurrencyQueue,
		StreamIdleTimeout:     DefaultStreamIdleTimeout,
		Counting:              true,
		RequestMetrics:        true,
		Tracing:               tracing.DefaultOptions(),
		Log:                   logging.DefaultOptions(),
	}
}

// ParseOptions fills Options from args (without the program name), falling
// back to the environment read through getenv and then to DefaultOptions
// (package options says how). It returns every problem found, joined,
// including those of Validate, or an error wrapping flag.ErrHelp for -h.
func ParseOptions(args []string, getenv func(string) string) (Options, error) {
	return options.Parse("ebb-sidecar", DefaultOptions(), args, getenv)
}

// Bind adds the sidecar's flags to s.
func (o *Options) Bind(s *options.Set) {
	s.String(&o.Listen, "listen", "address clients connect to")
	s.String(&o.Upstream, "upstream", "the app's host:port")
	s.String(&o.AdminListen, "admin-listen", "address of /stats, /ready and /metrics")
	s.Duration(&o.DrainTimeout, "drain-timeout", "longest drain after SIGTERM")
	s.Duration(&o.DrainDelay, "drain-delay", "quiet period (no new request) GET /wait-for-drain waits for")
	s.Duration(&o.HeaderTimeout, "header-timeout", "time a client has to send a request head")
	s.Duration(&o.IdleTimeout, "idle-timeout", "idle keep-alive timeout and stalled body timeout")
	s.Duration(&o.ResponseHeaderTimeout, "response-header-timeout", "longest wait for the app's response head (504 after it; 0: no limit)")
	s.Int(&o.MaxHeaderBytes, "max-header-bytes", "largest request head accepted (431 above)")
	s.String(&o.StaticResponses, "static-responses", "static responses as a JSON array of rules (set by the webhook from the app's RoutePolicy): Always rules are answered here, never reaching the app nor counted; requests of AtZero rules without header conditions reach the app uncounted when they have no body and no upgrade")
	s.Int(&o.Concurrency, "concurrency", "most requests the app is given at once, the rest queued (0: no limit)")
	s.Int(&o.ConcurrencyQueue, "concurrency-queue", "requests that wait beyond --concurrency (503 with Retry-After past them)")
	s.Duration(&o.RequestTimeout, "request-timeout", "longest exchange, from the request head to the end of the response (504 before the response head, the connection closed after it; 0: no limit)")
	s.Duration(&o.StreamIdleTimeout, "stream-idle-timeout", "an upgraded connection (WebSocket) or a streaming exchange is closed after this long without a byte either way")
	s.String(&o.AppReadiness, "app-readiness", "the app's readiness check as JSON (set by the webhook from the app's readiness probe); empty: ready when the app's port accepts")
	s.Bool(&o.Counting, "counting", "count requests (turn off only to benchmark)")
	s.Bool(&o.RequestMetrics, "request-metrics", "export the request-duration histogram and status counts")
	s.String(&o.Instance, "instance", "the ebb instance (group suffix) that injected this sidecar, the ebb_instance label of its metrics")
	o.Tracing.Bind(s)
	o.Log.Bind(s)
	s.Pod(&o.PodName, &o.PodNamespace, &o.PodIP)
}

// Validate returns every problem of o at once, joined, or nil.
func (o Options) Validate() error {
	var problems []error
	addr := func(name, v string, needHost bool) {
		host, port, err := net.SplitHostPort(v)
		if err != nil {
			problems = append(problems, fmt.Errorf("--%s %q: want host:port: %w", name, v, err))
			return
		}
		if needHost && host == "" {
			problems = append(problems, fmt.Errorf("--%s %q: host is empty", name, v))
		}
		if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 || (needHost && n == 0) {
			problems = append(problems, fmt.Errorf("--%s %q: port %q is not a port number", name, v, port))
		}
	}
	addr("listen", o.Listen, false)
	addr("upstream", o.Upstream, true)
	addr("admin-listen", o.AdminListen, false)
	if o.Listen == o.AdminListen && o.Listen != "" && !hasPortZero(o.Listen) {
		problems = append(problems, fmt.Errorf("--listen and --admin-listen are both %q", o.Listen))
	}
	if o.DrainTimeout < 0 {
		problems = append(problems, fmt.Errorf("--drain-timeout %v: must not be negative", o.DrainTimeout))
	}
	if o.DrainDelay < 0 {
		problems = append(problems, fmt.Errorf("--drain-delay %v: must not be negative", o.DrainDelay))
	}
	if o.HeaderTimeout <= 0 {
		problems = append(problems, fmt.Errorf("--header-timeout %v: must be positive", o.HeaderTimeout))
	}
	if o.IdleTimeout <= 0 {
		problems = append(problems, fmt.Errorf("--idle-timeout %v: must be positive", o.IdleTimeout))
	}
	if o.ResponseHeaderTimeout < 0 {
		problems = append(problems, fmt.Errorf("--response-header-timeout %v: must not be negative", o.ResponseHeaderTimeout))
	}
	if o.MaxHeaderBytes < 1<<10 || o.MaxHeaderBytes > 1<<20 {
		problems = append(problems, fmt.Errorf("--max-header-bytes %d: must be between 1024 and 1048576", o.MaxHeaderBytes))
	}
	if _, err := staticanswer.Parse(o.StaticResponses); err != nil {
		problems = append(problems, fmt.Errorf("--static-responses: %w", err))
	}
	if o.Concurrency < 0 {
		problems = append(problems, fmt.Errorf("--concurrency %d: must not be negative (0: no limit)", o.Concurrency))
	}
	if o.ConcurrencyQueue < 0 {
		problems = append(problems, fmt.Errorf("--concurrency-queue %d: must not be negative", o.ConcurrencyQueue))
	}
	if o.RequestTimeout < 0 {
		problems = append(problems, fmt.Errorf("--request-timeout %v: must not be negative (0: no limit)", o.RequestTimeout))
	}
	if o.StreamIdleTimeout <= 0 {
		problems = append(problems, fmt.Errorf("--stream-idle-timeout %v: must be positive", o.StreamIdleTimeout))
	}
	if o.AppReadiness != "" {
		if _, err := readiness.Parse(o.AppReadiness); err != nil {
			problems = append(problems, fmt.Errorf("--app-readiness: %w", err))
		}
	}
	problems = append(problems, o.Tracing.Validate(), o.Log.Validate())
	return errors.Join(problems...)
}

func hasPortZero(a string) bool {
	_, port, err := net.SplitHostPort(a)
	return err == nil && port == "0"
}
