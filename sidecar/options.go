package sidecar

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/ebb-dev/ebb/internal/readiness"
	"github.com/ebb-dev/ebb/internal/stats"
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
	// AppReadiness is the app's own readiness check (readiness.Check in its
	// JSON form, from the app container's readiness probe); empty: the app
	// is ready when its port accepts connections.
	AppReadiness string
	// Counting turns the request counters on (the default) or off.
	Counting bool
	// LogLevel is debug, info, warn or error.
	LogLevel string
	// LogFormat is json or text.
	LogFormat string
	// PodName, PodNamespace and PodIP come from the downward API and are
	// used in logs only.
	PodName, PodNamespace, PodIP string
}

// DefaultResponseHeaderTimeout is how long the sidecar waits for the app's
// response head unless told otherwise.
const DefaultResponseHeaderTimeout = 10 * time.Minute

// DefaultOptions returns the options used when neither a flag nor an
// environment variable sets them.
func DefaultOptions() Options {
	return Options{
		Listen:        ":" + strconv.Itoa(stats.DefaultListenPort),
		Upstream:      "127.0.0.1:8080",
		AdminListen:   ":" + strconv.Itoa(stats.DefaultAdminPort),
		DrainTimeout:  30 * time.Second,
		DrainDelay:    5 * time.Second,
		HeaderTimeout: 10 * time.Second,
		IdleTimeout:   120 * time.Second,
		// Knative's longest revision timeout: generous enough for a slow
		// but live app, a bound for one that never answers.
		ResponseHeaderTimeout: DefaultResponseHeaderTimeout,
		MaxHeaderBytes:        64 << 10,
		Counting:              true,
		LogLevel:              "info",
		LogFormat:             "json",
	}
}

// ParseOptions fills Options from args (without the program name), falling
// back to the environment read through getenv and then to DefaultOptions. It
// returns every problem found, joined, including those of Validate.
func ParseOptions(args []string, getenv func(string) string) (Options, error) {
	o := DefaultOptions()
	var problems []error
	fs := flag.NewFlagSet("ebb-sidecar", flag.ContinueOnError)
	fs.SetOutput(io.Discard)

	str := func(p *string, name, env, usage string) {
		if v := getenv(env); v != "" {
			*p = v
		}
		fs.StringVar(p, name, *p, usage+" (env "+env+")")
	}
	dur := func(p *time.Duration, name, env, usage string) {
		if v := getenv(env); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil {
				problems = append(problems, fmt.Errorf("%s=%q: not a duration", env, v))
			} else {
				*p = d
			}
		}
		fs.DurationVar(p, name, *p, usage+" (env "+env+")")
	}
	integer := func(p *int, name, env, usage string) {
		if v := getenv(env); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil {
				problems = append(problems, fmt.Errorf("%s=%q: not an integer", env, v))
			} else {
				*p = n
			}
		}
		fs.IntVar(p, name, *p, usage+" (env "+env+")")
	}
	boolean := func(p *bool, name, env, usage string) {
		if v := getenv(env); v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				problems = append(problems, fmt.Errorf("%s=%q: not a boolean", env, v))
			} else {
				*p = b
			}
		}
		fs.BoolVar(p, name, *p, usage+" (env "+env+")")
	}

	str(&o.Listen, "listen", "EBB_LISTEN", "address clients connect to")
	str(&o.Upstream, "upstream", "EBB_UPSTREAM", "the app's host:port")
	str(&o.AdminListen, "admin-listen", "EBB_ADMIN_LISTEN", "address of /stats, /ready and /metrics")
	dur(&o.DrainTimeout, "drain-timeout", "EBB_DRAIN_TIMEOUT", "longest drain after SIGTERM")
	dur(&o.DrainDelay, "drain-delay", "EBB_DRAIN_DELAY", "quiet period (no new request) GET /wait-for-drain waits for")
	dur(&o.HeaderTimeout, "header-timeout", "EBB_HEADER_TIMEOUT", "time a client has to send a request head")
	dur(&o.IdleTimeout, "idle-timeout", "EBB_IDLE_TIMEOUT", "idle keep-alive timeout and stalled body timeout")
	dur(&o.ResponseHeaderTimeout, "response-header-timeout", "EBB_RESPONSE_HEADER_TIMEOUT", "longest wait for the app's response head (504 after it; 0: no limit)")
	integer(&o.MaxHeaderBytes, "max-header-bytes", "EBB_MAX_HEADER_BYTES", "largest request head accepted (431 above)")
	str(&o.AppReadiness, "app-readiness", "EBB_APP_READINESS", "the app's readiness check as JSON (set by the webhook from the app's readiness probe); empty: ready when the app's port accepts")
	boolean(&o.Counting, "counting", "EBB_COUNTING", "count requests (turn off only to benchmark)")
	str(&o.LogLevel, "log-level", "EBB_LOG_LEVEL", "debug, info, warn or error")
	str(&o.LogFormat, "log-format", "EBB_LOG_FORMAT", "json or text")
	o.PodName = getenv("POD_NAME")
	o.PodNamespace = getenv("POD_NAMESPACE")
	o.PodIP = getenv("POD_IP")

	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		var usage strings.Builder
		fs.SetOutput(&usage)
		fs.PrintDefaults()
		return o, fmt.Errorf("usage of ebb-sidecar (flags win over env, env over defaults):\n%s", usage.String())
	} else if err != nil {
		problems = append(problems, err)
	} else if fs.NArg() > 0 {
		problems = append(problems, fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	if err := o.Validate(); err != nil {
		problems = append(problems, err)
	}
	if len(problems) > 0 {
		return o, fmt.Errorf("invalid options: %w", errors.Join(problems...))
	}
	return o, nil
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
	if o.AppReadiness != "" {
		if _, err := readiness.Parse(o.AppReadiness); err != nil {
			problems = append(problems, fmt.Errorf("--app-readiness: %w", err))
		}
	}
	switch o.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		problems = append(problems, fmt.Errorf("--log-level %q: want debug, info, warn or error", o.LogLevel))
	}
	switch o.LogFormat {
	case "json", "text":
	default:
		problems = append(problems, fmt.Errorf("--log-format %q: want json or text", o.LogFormat))
	}
	return errors.Join(problems...)
}

func hasPortZero(a string) bool {
	_, port, err := net.SplitHostPort(a)
	return err == nil && port == "0"
}
