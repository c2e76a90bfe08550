// Package tracing is the one OpenTelemetry set-up of ebb's binaries:
// --otlp-endpoint and --trace-sampling, W3C trace context (traceparent)
// in and out, and spans batched to an OTLP/HTTP receiver. With no endpoint
// (the default) it makes no tracer at all, and the data path pays one nil
// check per request.
//
// The exporter is this package's own (otlp.go): the OTLP/HTTP protobuf
// encoding of the specification, built from the OTLP protocol's Go types,
// so that the sidecar links neither gRPC nor the OTLP collector's
// service packages.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/ebb-dev/ebb/internal/options"
)

// Options are the tracing flags every binary has.
type Options struct {
	// Endpoint is the OTLP/HTTP receiver's base URL (http://collector:4318);
	// spans go to Endpoint + "/v1/traces". Empty: tracing is off.
	Endpoint string
	// Sampling is the ratio of the traces ebb starts that are recorded
	// (0 to 1). A request whose traceparent says sampled is always
	// recorded, one that says not sampled never.
	Sampling float64
}

// DefaultSampling is the ratio of the traces ebb starts that are sampled.
const DefaultSampling = 0.1

// DefaultOptions trace nothing.
func DefaultOptions() Options { return Options{Sampling: DefaultSampling} }

// Bind adds --otlp-endpoint and --trace-sampling to s.
func (o *Options) Bind(s *options.Set) {
	s.String(&o.Endpoint, "otlp-endpoint", "OTLP/HTTP receiver for traces (http://host:4318); empty: no tracing")
	s.Float64(&o.Sampling, "trace-sampling", "ratio (0-1) of the traces ebb starts that are sampled; a sampled traceparent is always followed")
}

// Validate returns every problem of o, naming the flags.
func (o Options) Validate() error {
	var problems []error
	if o.Endpoint != "" {
		u, err := url.Parse(o.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			problems = append(problems, fmt.Errorf("--otlp-endpoint %q: want http://host:port or https://host:port", o.Endpoint))
		}
	}
	if !(o.Sampling >= 0 && o.Sampling <= 1) {
		problems = append(problems, fmt.Errorf("--trace-sampling %v: want a ratio between 0 and 1", o.Sampling))
	}
	return errors.Join(problems...)
}

// Propagator reads and writes W3C trace context (traceparent, tracestate).
var Propagator = propagation.TraceContext{}

// Provider makes the spans of one binary.
type Provider struct {
	tp *sdktrace.TracerProvider
	// Tracer makes spans; nil when tracing is off.
	Tracer trace.Tracer
}

// New returns the Provider for o; with no endpoint, one whose Tracer is
// nil. service names the binary (service.name), attrs describe the process
// (the pod, the instance).
func New(o Options, service string, attrs ...attribute.KeyValue) *Provider {
	if o.Endpoint == "" {
		return &Provider{}
	}
	exp := newExporter(o.Endpoint, append([]attribute.KeyValue{attribute.String("service.name", service)}, attrs...))
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(o.Sampling))),
		sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(time.Second)),
	)
	return &Provider{tp: tp, Tracer: tp.Tracer("github.com/ebb-dev/ebb/" + service)}
}

// Shutdown sends the spans still batched, within ctx.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p == nil || p.tp == nil {
		return nil
	}
	return p.tp.Shutdown(ctx)
}

// ForceFlush sends the spans batched now.
func (p *Provider) ForceFlush(ctx context.Context) error {
	if p == nil || p.tp == nil {
		return nil
	}
	return p.tp.ForceFlush(ctx)
}

// Bytes is a TextMapCarrier over one traceparent value held as bytes
// (the HTTP/1.1 engine's header), for Propagator.Extract.
type Bytes []byte

func (b Bytes) Get(key string) string {
	if key == "traceparent" {
		return string(b)
	}
	return ""
}
func (Bytes) Set(string, string) {}
func (Bytes) Keys() []string     { return []string{"traceparent"} }

// TraceParent appends the traceparent value of sc to b.
func TraceParent(b []byte, sc trace.SpanContext) []byte {
	tid, sid := sc.TraceID(), sc.SpanID()
	b = append(b, "00-"...)
	b = appendHex(b, tid[:])
	b = append(b, '-')
	b = appendHex(b, sid[:])
	if sc.IsSampled() {
		return append(b, "-01"...)
	}
	return append(b, "-00"...)
}

func appendHex(b, v []byte) []byte {
	const digits = "0123456789abcdef"
	for _, c := range v {
		b = append(b, digits[c>>4], digits[c&15])
	}
	return b
}

// TraceParentLen is the length of a version-00 traceparent value.
const TraceParentLen = 55
