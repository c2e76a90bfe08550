// Package reqmetrics records what happens to the requests a component
// forwards: how long each took and how it ended (status class, protocol,
// gRPC status), as Prometheus metrics cheap enough for the hot path and for
// a fleet's scrapes. A series exists once it has been observed: an idle
// component exports none, a busy one the label combinations it has seen.
// Only the first request of a combination creates its series; after that,
// recording a request takes no allocation and no lock: an atomic load, one
// histogram observation, and one counter for gRPC.
package reqmetrics

import (
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	h1 "github.com/ebb-dev/ebb/internal/http1"
)

// Protocol is how a request came.
type Protocol uint8

// The protocols a request is recorded under.
const (
	HTTP1   Protocol = iota // HTTP/1.x
	H2C                     // HTTP/2 over cleartext, gRPC excluded
	GRPC                    // HTTP/2 with content-type application/grpc
	Upgrade                 // an upgraded connection (WebSocket): its whole life
	nProtocols
)

var protocolNames = [nProtocols]string{"http1", "h2c", "grpc", "upgrade"}

func (p Protocol) String() string { return protocolNames[p] }

// codeClasses are the values of the code label: "none" for a request that
// got no response (the client went away first), then 1xx to 5xx.
var codeClasses = [6]string{"none", "1xx", "2xx", "3xx", "4xx", "5xx"}

// grpcCodes are the names of the gRPC status codes, by number
// (google.golang.org/grpc/codes), and "unknown" for anything else.
var grpcCodes = [...]string{
	"OK", "Canceled", "Unknown", "InvalidArgument", "DeadlineExceeded", "NotFound",
	"AlreadyExists", "PermissionDenied", "ResourceExhausted", "FailedPrecondition",
	"Aborted", "OutOfRange", "Unimplemented", "Internal", "Unavailable", "DataLoss",
	"Unauthenticated",
}

// Buckets are the request-duration histogram's bounds, in seconds: 10
// bounds (13 samples a series with +Inf, _sum and _count) from 1 ms to
// 60 s. 1 ms and 5 ms tell a fast app (and the hop through ebb) from the
// rest; 25 ms to 1 s hold the usual latency objectives (100 ms, 250 ms,
// 500 ms, 1 s are bounds, so the share of requests within them is exact);
// 2.5 s and 10 s tell a request that waited for a cold start (ebb's take
// a few seconds) from one that waited longer; beyond 60 s are streams and
// open WebSockets. Neighbouring bounds are 2 to 6 times apart, so
// histogram_quantile is within one such step.
var Buckets = []float64{.001, .005, .025, .1, .25, .5, 1, 2.5, 10, 60}

// Recorder records requests. A nil Recorder records nothing: the
// component's metrics switch is off.
type Recorder struct {
	hist      *prometheus.HistogramVec
	grpcTotal *prometheus.CounterVec
	// obs and grpc hold each label combination's series once it has been
	// observed; nil before.
	obs  [nProtocols][len(codeClasses)]atomic.Pointer[observer]
	grpc [len(grpcCodes) + 1]atomic.Pointer[counter]
}

type (
	observer struct{ prometheus.Observer }
	counter  struct{ prometheus.Counter }
)

// Names are one component's metric names.
type Names struct {
	// Duration is the histogram (labels protocol and code).
	Duration string
	// GRPC counts gRPC requests (label grpc_code).
	GRPC string
}

// The components that forward requests.
var (
	Sidecar   = Names{Duration: "ebb_sidecar_request_duration_seconds", GRPC: "ebb_sidecar_grpc_requests_total"}
	Activator = Names{Duration: "ebb_activator_request_duration_seconds", GRPC: "ebb_activator_grpc_requests_total"}
)

// New registers on reg the metrics names, and returns a Recorder for them.
func New(reg prometheus.Registerer, names Names) *Recorder {
	hist := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    names.Duration,
		Help:    "Requests forwarded, from the first byte of the request head to the end of the response (an upgraded connection: to its close), by protocol (http1, h2c, grpc, upgrade) and status class (1xx-5xx; none: the client left before a response).",
		Buckets: Buckets,
	}, []string{"protocol", "code"})
	grpcTotal := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: names.GRPC,
		Help: "gRPC requests forwarded, by the grpc-status the app answered with (unknown: none or not a known code).",
	}, []string{"grpc_code"})
	reg.MustRegister(hist, grpcTotal)
	return &Recorder{hist: hist, grpcTotal: grpcTotal}
}

// observer returns the series of protocol p and code class c, created on
// its first use.
func (r *Recorder) observer(p Protocol, c int) prometheus.Observer {
	if o := r.obs[p][c].Load(); o != nil {
		return o.Observer
	}
	r.obs[p][c].CompareAndSwap(nil, &observer{r.hist.WithLabelValues(protocolNames[p], codeClasses[c])})
	return r.obs[p][c].Load().Observer
}

// grpcCounter returns the series of the i-th gRPC code (len(grpcCodes):
// unknown), created on its first use.
func (r *Recorder) grpcCounter(i int) prometheus.Counter {
	if c := r.grpc[i].Load(); c != nil {
		return c.Counter
	}
	name := "unknown"
	if i < len(grpcCodes) {
		name = grpcCodes[i]
	}
	r.grpc[i].CompareAndSwap(nil, &counter{r.grpcTotal.WithLabelValues(name)})
	return r.grpc[i].Load().Counter
}

// Observe records one request that began at start and got status code
// (0: no response).
func (r *Recorder) Observe(p Protocol, code int, start time.Time) {
	if r == nil {
		return
	}
	c := code / 100
	if c < 1 || c > 5 {
		c = 0
	}
	r.observer(p, c).Observe(time.Since(start).Seconds())
}

// ObserveGRPC counts a gRPC request's status, the value of its
// grpc-status trailer (or header, for a trailers-only response).
func (r *Recorder) ObserveGRPC(status string) {
	if r == nil {
		return
	}
	i := len(grpcCodes)
	if n, ok := smallInt(status); ok && n < len(grpcCodes) {
		i = n
	}
	r.grpcCounter(i).Inc()
}

func smallInt(s string) (int, bool) {
	if len(s) == 0 || len(s) > 2 {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = n*10 + int(s[i]-'0')
	}
	return n, true
}

// IsGRPC reports whether an HTTP/2 request is gRPC, by its content type.
func IsGRPC(r *http.Request) bool {
	return strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc")
}

// Writer is an http.ResponseWriter that remembers the status code, for a
// handler that forwards with httputil.ReverseProxy (which reaches Flush and
// Hijack through Unwrap, by http.ResponseController).
type Writer struct {
	http.ResponseWriter
	Code int
	// OnHead, when set, is called once, as the response head goes out.
	OnHead func()
}

func (w *Writer) WriteHeader(code int) {
	if w.Code == 0 || w.Code < 200 && code >= 200 {
		if code >= 200 || code == http.StatusSwitchingProtocols {
			w.Code = code
			if w.OnHead != nil {
				w.OnHead()
				w.OnHead = nil
			}
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *Writer) Write(b []byte) (int, error) {
	if w.Code == 0 {
		w.WriteHeader(http.StatusOK) // as net/http does for a first Write
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap returns the wrapped writer (http.ResponseController).
func (w *Writer) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// GRPCStatus is the grpc-status the response carried, as a trailer or
// (trailers-only) a header; "" if none. Call it after the handler returned.
func (w *Writer) GRPCStatus() string {
	h := w.ResponseWriter.Header()
	if v := h.Get("Grpc-Status"); v != "" {
		return v
	}
	return h.Get(http.TrailerPrefix + "Grpc-Status")
}

// Serve forwards r with next through a Writer and records it.
func (r *Recorder) Serve(next http.Handler, w http.ResponseWriter, req *http.Request, start time.Time) {
	if r == nil {
		next.ServeHTTP(w, req)
		return
	}
	rw := &Writer{ResponseWriter: w}
	next.ServeHTTP(rw, req)
	r.Record(rw, req, start)
}

// Record records a request forwarded through rw, after the handler
// returned.
func (r *Recorder) Record(rw *Writer, req *http.Request, start time.Time) {
	if r == nil {
		return
	}
	p := HTTP1
	switch {
	case rw.Code == http.StatusSwitchingProtocols:
		p = Upgrade
	case req.ProtoMajor == 2 && IsGRPC(req):
		p = GRPC
		r.ObserveGRPC(rw.GRPCStatus())
	case req.ProtoMajor == 2:
		p = H2C
	}
	code := rw.Code
	if code == 0 && req.Context().Err() == nil {
		code = http.StatusOK // a handler that wrote nothing: net/http sends 200
	}
	r.Observe(p, code, start)
}

// ObserveH1 records the exchange the HTTP/1.1 engine just finished on cc
// (call it after RoundTrip): an upgrade for a 101, HTTP/1.1 otherwise.
func (r *Recorder) ObserveH1(cc *h1.Conn) {
	if r == nil {
		return
	}
	p := HTTP1
	if cc.Status() == http.StatusSwitchingProtocols {
		p = Upgrade
	}
	r.Observe(p, cc.Status(), cc.Began())
}
