package sidecar

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	h1 "github.com/ebb-dev/ebb/internal/http1"
)

// The h2c differential: the same HTTP/2 frames (a request built from
// fuzzed method, path, authority, header fields, body and trailers) go to a
// net/http h2c server directly (the oracle: what net/http's h2 server
// parsed) and to the sidecar in front of the same server (what the app
// gets through the sidecar's h2c path, which speaks h2c to the app). Both
// must take or refuse the request alike, and a request taken must reach the
// app as the oracle parsed it: method, target, authority, header fields,
// body bytes, Content-Length and trailers. The deliberate differences, each
// with its reason, are the allow-list: the refusals in differential (what
// the HTTP/1.1 engine refuses too) and h2cAllowed.

// h2cSeen is what the recording app parsed of one request.
type h2cSeen struct {
	Method, Target, Host string
	Header               http.Header
	ContentLength        int64
	Body                 string
	Trailer              http.Header
	BodyErr              string
}

// recordingApp is an h2c (and HTTP/1.1) server that records each request
// and answers 204.
type recordingApp struct {
	addr string
	seen chan h2cSeen
}

func startRecordingApp(t testing.TB) *recordingApp {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := &recordingApp{addr: ln.Addr().String(), seen: make(chan h2cSeen, 16)}
	srv := &http.Server{Protocols: new(http.Protocols), Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		s := h2cSeen{Method: r.Method, Target: r.RequestURI, Host: r.Host, Header: r.Header.Clone(), ContentLength: r.ContentLength, Body: string(b), Trailer: r.Trailer.Clone()}
		if err != nil {
			s.BodyErr = "the body was cut"
		}
		a.seen <- s
		w.WriteHeader(http.StatusNoContent)
	})}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return a
}

// h2cRequest is one fuzzed request.
type h2cRequest struct {
	method, path, authority string
	fields                  [][2]string // "name: value" lines of the header block
	body                    []byte
	trailers                [][2]string
}

// parseFields reads "name:value" lines (one per line; a line without a
// colon is a name with an empty value).
func parseFields(s string) [][2]string {
	var out [][2]string
	for l := range strings.SplitSeq(s, "\n") {
		if l == "" {
			continue
		}
		k, v, _ := strings.Cut(l, ":")
		out = append(out, [2]string{k, strings.TrimPrefix(v, " ")})
	}
	return out
}

// send writes rq as HTTP/2 frames on a new connection to addr, exactly as
// given (nothing checked or normalized), and reads until the stream ends,
// is reset or the connection closes.
func (rq h2cRequest) send(addr string) error {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(conn, h2Preface)
	fr := http2.NewFramer(conn, conn)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	fr.WriteSettings()
	block := func(fields ...[2]string) []byte {
		var buf bytes.Buffer
		enc := hpack.NewEncoder(&buf)
		for _, f := range fields {
			enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		return buf.Bytes()
	}
	head := [][2]string{{":method", rq.method}, {":scheme", "http"}, {":authority", rq.authority}, {":path", rq.path}}
	head = append(head, rq.fields...)
	endInHead := len(rq.body) == 0 && len(rq.trailers) == 0
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block(head...), EndStream: endInHead, EndHeaders: true}); err != nil {
		return err
	}
	if len(rq.body) > 0 {
		// Within the initial windows (65,535) and frame size (16,384).
		for b := rq.body; len(b) > 0; {
			n := min(len(b), 16384)
			if err := fr.WriteData(1, n == len(b) && len(rq.trailers) == 0, b[:n]); err != nil {
				return err
			}
			b = b[n:]
		}
	}
	if len(rq.trailers) > 0 {
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block(rq.trailers...), EndStream: true, EndHeaders: true}); err != nil {
			return err
		}
	}
	var answer error // nil: 204 from the app
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return err
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				fr.WritePing(true, f.Data)
			}
		case *http2.RSTStreamFrame:
			return fmt.Errorf("stream reset: %v", f.ErrCode)
		case *http2.GoAwayFrame:
			return fmt.Errorf("GOAWAY %v", f.ErrCode)
		case *http2.MetaHeadersFrame:
			if st := f.PseudoValue("status"); st != "" && st != "204" {
				answer = fmt.Errorf("answered %s", st)
			}
			if f.StreamEnded() {
				return answer
			}
		case *http2.DataFrame:
			if f.StreamEnded() {
				return answer
			}
		}
	}
}

// exchange sends rq to addr and returns what app recorded (nil if the app
// got no request).
func (rq h2cRequest) exchange(addr string, app *recordingApp) (*h2cSeen, error) {
	err := rq.send(addr)
	// The app records a request before it answers 204: with that answer
	// the record is there; otherwise the app may have had the head of a
	// request cut short.
	wait := 20 * time.Millisecond
	if err == nil {
		wait = time.Second
	}
	select {
	case s := <-app.seen:
		return &s, err
	case <-time.After(wait):
		return nil, err
	}
}

// h2cAllowed says why the request the app got through the sidecar (via)
// may differ from what net/http's h2 server parsed (direct), or "" when it
// may not; it removes from via what it allows.
func h2cAllowed(direct, via *h2cSeen) string {
	var why []string
	// The forwarding policy (internal/http1/forwarded.go): X-Forwarded-For
	// gets the client's address appended.
	xff := strings.Join(direct.Header["X-Forwarded-For"], ", ")
	if xff != "" {
		xff += ", "
	}
	if got := strings.Join(via.Header["X-Forwarded-For"], ", "); got == xff+"127.0.0.1" {
		via.Header["X-Forwarded-For"] = direct.Header["X-Forwarded-For"]
		if len(direct.Header["X-Forwarded-For"]) == 0 {
			delete(via.Header, "X-Forwarded-For")
		}
		why = append(why, "X-Forwarded-For appended to (the forwarding policy)")
	}
	// Hop-by-hop headers (RFC 9110 section 7.6.1) that net/http's h2 server
	// lets through and httputil.ReverseProxy drops: they are meant for the
	// sidecar, not the app. (Connection, Keep-Alive, Proxy-Connection,
	// Transfer-Encoding, Upgrade and a TE other than "trailers" make an
	// HTTP/2 request malformed: both refuse them.)
	for _, k := range []string{"Proxy-Authenticate", "Proxy-Authorization"} {
		if _, ok := direct.Header[k]; ok {
			if _, ok := via.Header[k]; !ok {
				delete(direct.Header, k)
				why = append(why, k+" dropped as hop-by-hop")
			}
		}
	}
	// The request body's framing is re-declared by net/http's transport:
	// a POST, PUT or PATCH with an empty body gets "content-length: 0".
	if _, ok := direct.Header["Content-Length"]; !ok && via.ContentLength == 0 && direct.ContentLength == 0 &&
		slices.Equal(via.Header["Content-Length"], []string{"0"}) {
		delete(via.Header, "Content-Length")
		why = append(why, "an empty body declared with content-length: 0")
	}
	return strings.Join(why, "; ")
}

var h2cSeeds = []struct {
	method, path, authority, fields string
	body                            []byte
	trailers                        string
}{
	{"GET", "/", "a", "", nil, ""},
	{"GET", "/p?q=1&r=%20", "shop.example.com:80", "user-agent:curl/8\naccept:*/*\ncookie:a=1\ncookie:b=2", nil, ""},
	{"POST", "/upload", "a", "content-type:text/plain\ncontent-length:5", []byte("hello"), ""},
	{"POST", "/stream", "a", "content-type:application/octet-stream", bytes.Repeat([]byte("x"), 40000), ""},
	{"POST", "/grpc.health.v1.Health/Check", "a", "content-type:application/grpc\nte:trailers\ntrailer:grpc-status", []byte("\x00\x00\x00\x00\x00"), "grpc-status:0"},
	{"PUT", "/", "a", "", nil, ""},
	{"GET", "/", "a", "x-forwarded-for:10.1.1.1\nx-forwarded-host:shop.example.com\nx-forwarded-proto:https\nforwarded:for=10.1.1.1", nil, ""},
	{"GET", "/", "a", "proxy-authorization:Basic eDp5\nx-custom:kept", nil, ""},
	{"GET", "/", "a", "connection:close", nil, ""},              // malformed in HTTP/2
	{"GET", "/", "a", "te:gzip", nil, ""},                       // malformed in HTTP/2
	{"POST", "/", "a", "content-length:3", []byte("hello"), ""}, // body longer than declared
	{"POST", "/", "a", "content-length:9", []byte("hello"), ""}, // body shorter than declared
	{"GET", "/", "a", "Upper-Case:no", nil, ""},                 // malformed in HTTP/2
	{"GET", "/", "a", "x-a:\x00", nil, ""},                      // malformed value
	{"GET", "/", "a", ":path:/again", nil, ""},                  // pseudo-header after a regular one
	{"POST", "/", "a", "trailer:x-sum", []byte("body"), "x-sum:42\nx-undeclared:1"},
	{"OPTIONS", "*", "a", "", nil, ""},
	{"CONNECT", "", "a:443", "", nil, ""},
}

// FuzzDifferentialH2C: see the comment at the top of this file.
func FuzzDifferentialH2C(f *testing.F) {
	for _, s := range h2cSeeds {
		f.Add(s.method, s.path, s.authority, s.fields, s.body, s.trailers)
	}
	direct := startRecordingApp(f)
	behind := startRecordingApp(f)
	r := startSidecar(f, testOptions(behind.addr))
	var mu sync.Mutex // one exchange at a time: the apps' records are matched by order
	f.Fuzz(func(t *testing.T, method, path, authority, fields string, body []byte, trailers string) {
		if len(body) > 60000 || len(fields)+len(trailers) > 8000 {
			return
		}
		rq := h2cRequest{method: method, path: path, authority: authority, fields: parseFields(fields), body: body, trailers: parseFields(trailers)}
		mu.Lock()
		defer mu.Unlock()
		start := time.Now()
		defer func() {
			if took := time.Since(start); took > 3*time.Second {
				t.Fatalf("the two exchanges took %v: something waits for a timeout", took)
			}
		}()
		if fail, why := rq.differential(direct, behind, r.addr); fail != "" {
			t.Fatal(fail)
		} else if why != "" {
			t.Logf("allowed difference (%s)", why)
		}
	})
}

// differential sends rq to the direct app and through the sidecar at addr
// to the app behind it; it returns what is wrong ("" if nothing) and the
// differences allowed.
func (rq h2cRequest) differential(direct, behind *recordingApp, addr string) (fail, why string) {
	want, errDirect := rq.exchange(direct.addr, direct)
	got, errVia := rq.exchange(addr, behind)
	switch {
	case want == nil && got == nil:
		return "", ""
	case want == nil:
		return fmt.Sprintf("net/http refused the request (%v) and the app got it through the sidecar:\n%+v", errDirect, *got), ""
	case want.BodyErr != "":
		// net/http took the head and then cut the body (longer than its
		// Content-Length, a reset): through the sidecar, whose h2 server
		// cuts it the same way, the app gets the head or not, depending on
		// how far the sidecar had come, and never a whole body.
		if got != nil && got.BodyErr == "" {
			return fmt.Sprintf("net/http cut the body and the app got a whole one through the sidecar:\n%+v", *got), ""
		}
		return "", "a body net/http cut: none or a cut one for the app"
	case got == nil && !h1.ValidMethod(want.Method):
		// An empty :method (or not a token): 400, as on HTTP/1.1; net/http's
		// transport would not send it.
		return "", "a malformed :method refused"
	case got == nil && !h1.ValidHost(want.Host):
		// A missing :authority (the app would get the sidecar's address
		// from net/http's transport) or one with bytes the HTTP/1.1 engine
		// refuses in a Host header: 400, as on HTTP/1.1; net/http's h2
		// server checks none.
		return "", "a missing or malformed :authority refused"
	case got == nil && !h1.ValidTarget(want.Target):
		// A :path with controls, SP or DEL, or a bad percent-escape: 400,
		// as the HTTP/1.1 engine refuses such a target (net/http's
		// transport re-escaped it: "/ " went to the app as "/%20").
		return "", "a malformed :path refused"
	case got == nil && !validTrailerNames(want.Trailer):
		// A declared trailer with no valid name (an empty one): 400;
		// net/http's transport would not send it on.
		return "", "a malformed trailer field name refused"
	case got == nil:
		return fmt.Sprintf("net/http took the request and the app did not get it through the sidecar (%v):\n%+v", errVia, *want), ""
	}
	why = h2cAllowed(want, got)
	if diff := cmp.Diff(want, got); diff != "" {
		return fmt.Sprintf("what the app got through the sidecar differs from what net/http parsed (-net/http +app), allowed: %q:\n%s", why, diff), ""
	}
	return "", why
}

// validTrailerNames reports whether every declared trailer is a field name.
func validTrailerNames(tr http.Header) bool {
	for name := range tr {
		if !h1.ValidFieldName(name) {
			return false
		}
	}
	return true
}

// TestH2CDifferentialSeeds runs the differential's seeds in -short runs
// too, and checks they cover both a request taken and one refused.
func TestH2CDifferentialSeeds(t *testing.T) {
	direct := startRecordingApp(t)
	behind := startRecordingApp(t)
	r := startSidecar(t, testOptions(behind.addr))
	var taken, refused int
	for _, s := range h2cSeeds {
		rq := h2cRequest{method: s.method, path: s.path, authority: s.authority, fields: parseFields(s.fields), body: s.body, trailers: parseFields(s.trailers)}
		fail, why := rq.differential(direct, behind, r.addr)
		if fail != "" {
			t.Errorf("%s %q %q: %s", s.method, s.path, s.fields, fail)
		}
		if why == "" {
			continue
		}
		t.Logf("%s %q %q: allowed difference (%s)", s.method, s.path, s.fields, why)
	}
	// Each seed once more, directly, to count what net/http takes.
	for _, s := range h2cSeeds {
		rq := h2cRequest{method: s.method, path: s.path, authority: s.authority, fields: parseFields(s.fields), body: s.body, trailers: parseFields(s.trailers)}
		if seen, _ := rq.exchange(direct.addr, direct); seen != nil {
			taken++
		} else {
			refused++
		}
	}
	if taken == 0 || refused == 0 {
		t.Errorf("seeds: %d taken, %d refused; want both", taken, refused)
	}
}
