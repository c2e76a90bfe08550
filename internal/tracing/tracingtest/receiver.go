// Package tracingtest is an OTLP/HTTP trace receiver for tests: it decodes
// each export as the OTLP specification's ExportTraceServiceRequest (the
// collector service's own Go type) and keeps the spans to assert on.
package tracingtest

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"sync"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// MaxSpans bounds what a Receiver keeps; later spans are dropped.
const MaxSpans = 100_000

// Span is one span received.
type Span struct {
	TraceID, SpanID, ParentSpanID string // hex; ParentSpanID "" for a root
	Name                          string
	Service                       string // the resource's service.name
	Start, End                    time.Time
	Attributes                    map[string]string
}

// Duration is End - Start.
func (s Span) Duration() time.Duration { return s.End.Sub(s.Start) }

// Receiver serves POST /v1/traces.
type Receiver struct {
	ln  net.Listener
	srv *http.Server

	mu    sync.Mutex
	spans []Span
	bad   int // exports that did not decode
}

// Start listens on addr (host:port; port 0 for any) and serves.
func Start(addr string) (*Receiver, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen for OTLP: %w", err)
	}
	r := &Receiver{ln: ln}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", r.export)
	r.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go r.srv.Serve(ln)
	return r, nil
}

// URL is the endpoint to give an exporter (--otlp-endpoint).
func (r *Receiver) URL() string { return "http://" + r.ln.Addr().String() }

// Close stops serving.
func (r *Receiver) Close() { r.srv.Close() }

func (r *Receiver) export(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(io.LimitReader(req.Body, 16<<20))
	var msg collectortrace.ExportTraceServiceRequest
	if err == nil && req.Header.Get("Content-Type") == "application/x-protobuf" {
		err = proto.Unmarshal(body, &msg)
	} else if err == nil {
		err = fmt.Errorf("content type %q", req.Header.Get("Content-Type"))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.bad++
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	for _, rs := range msg.GetResourceSpans() {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				if len(r.spans) >= MaxSpans {
					continue
				}
				attrs := map[string]string{}
				for _, kv := range s.GetAttributes() {
					v := kv.GetValue()
					switch {
					case v.GetStringValue() != "":
						attrs[kv.GetKey()] = v.GetStringValue()
					default:
						attrs[kv.GetKey()] = fmt.Sprint(v.GetIntValue())
					}
				}
				r.spans = append(r.spans, Span{
					TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					ParentSpanID: hex.EncodeToString(s.GetParentSpanId()), Name: s.GetName(), Service: service,
					Start: time.Unix(0, int64(s.GetStartTimeUnixNano())), End: time.Unix(0, int64(s.GetEndTimeUnixNano())),
					Attributes: attrs,
				})
			}
		}
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(nil) // an empty ExportTraceServiceResponse
}

// Trace returns the spans of trace id (hex) received so far, by start time.
func (r *Receiver) Trace(id string) []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Span
	for _, s := range r.spans {
		if s.TraceID == id {
			out = append(out, s)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Start.Before(out[j].Start) })
	return out
}

// Count is the number of spans received, and of exports refused.
func (r *Receiver) Count() (spans, bad int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.spans), r.bad
}

// TraceParent is a sampled traceparent value for a new, random trace,
// as a client starting a trace would send it, with the trace's id and
// the client's span id.
func TraceParent() (value, traceID, spanID string) {
	var tid [16]byte
	var sid [8]byte
	rand.Read(tid[:])
	rand.Read(sid[:])
	traceID, spanID = hex.EncodeToString(tid[:]), hex.EncodeToString(sid[:])
	return "00-" + traceID + "-" + spanID + "-01", traceID, spanID
}
