package http1

import (
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/ebb-dev/ebb/internal/testwait"
)

// traceHandler sets the traceparent a tracing component would (ebb-sidecar
// with --otlp-endpoint) and records what the engine reported.
type traceHandler struct {
	up  *Upstream
	set string

	mu     sync.Mutex
	found  []string
	counts []int
	oks    []bool
	codes  []int
	began  []time.Time
}

func (h *traceHandler) ServeRequest(c *Conn, rq *Request) bool {
	v, n := c.TraceParent()
	found := string(v) // v is the head's bytes: SetTraceParent overwrites them
	ok := c.SetTraceParent([]byte(h.set))
	keep := c.RoundTrip(h.up, rq)
	h.mu.Lock()
	h.found, h.counts, h.oks = append(h.found, found), append(h.counts, n), append(h.oks, ok)
	h.codes, h.began = append(h.codes, c.Status()), append(h.began, c.Began())
	h.mu.Unlock()
	return keep
}

func (h *traceHandler) served() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.codes)
}

func (h *traceHandler) UpstreamError(up *Upstream, err error) string {
	return "ebb-test: " + err.Error()
}

func startTraceEngine(t *testing.T, appAddr, set string) (string, *traceHandler) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &traceHandler{up: NewUpstream(appAddr), set: set}
	srv := NewServer(testEngineOptions(), h, nil, logr.Discard())
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ln)
	}()
	t.Cleanup(func() {
		srv.Close()
		<-done
		h.up.CloseIdle(time.Now(), 0)
	})
	return ln.Addr().String(), h
}

const (
	clientTP = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	ebbTP    = "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01"
)

// TestTraceParentRewrite: the one traceparent of a request is rewritten in
// place (same length), a request without one gets one before the empty
// line, and a request with two, or one of another length, goes as
// received; in every case the framing the app sees is the engine's, the
// body arrives whole, and the next request on a fresh connection gets its
// own answer.
func TestTraceParentRewrite(t *testing.T) {
	for name, tc := range map[string]struct {
		send, wantApp string
		wantFound     string
		wantN         int
		wantOK        bool
	}{
		"one, rewritten in place": {
			send:      "POST /a HTTP/1.1\r\nHost: h\r\ntraceparent: " + clientTP + "\r\nContent-Length: 5\r\n\r\nhello",
			wantApp:   "POST /a HTTP/1.1\r\nHost: h\r\ntraceparent: " + ebbTP + "\r\nContent-Length: 5\r\nX-Forwarded-For: 127.0.0.1\r\n\r\nhello",
			wantFound: clientTP, wantN: 1, wantOK: true,
		},
		"odd spacing and case": {
			send:      "GET /b HTTP/1.1\r\nHost: h\r\nTraceParent:   " + clientTP + "  \r\n\r\n",
			wantApp:   "GET /b HTTP/1.1\r\nHost: h\r\nTraceParent:   " + ebbTP + "  \r\nX-Forwarded-For: 127.0.0.1\r\n\r\n",
			wantFound: clientTP, wantN: 1, wantOK: true,
		},
		"none, added": {
			send:    "POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
			wantApp: "POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nX-Forwarded-For: 127.0.0.1\r\ntraceparent: " + ebbTP + "\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
			wantN:   0, wantOK: true,
		},
		"two, left alone": {
			send:      "GET /d HTTP/1.1\r\nHost: h\r\ntraceparent: " + clientTP + "\r\ntraceparent: " + clientTP + "\r\n\r\n",
			wantApp:   "GET /d HTTP/1.1\r\nHost: h\r\ntraceparent: " + clientTP + "\r\ntraceparent: " + clientTP + "\r\nX-Forwarded-For: 127.0.0.1\r\n\r\n",
			wantFound: clientTP, wantN: 2,
		},
		"another length, left alone": {
			send:      "GET /e HTTP/1.1\r\nHost: h\r\ntraceparent: 00-short-01\r\n\r\n",
			wantApp:   "GET /e HTTP/1.1\r\nHost: h\r\ntraceparent: 00-short-01\r\nX-Forwarded-For: 127.0.0.1\r\n\r\n",
			wantFound: "00-short-01", wantN: 1,
		},
		"named by Connection: dropped, then added": {
			send:    "GET /f HTTP/1.1\r\nHost: h\r\nConnection: traceparent\r\ntraceparent: " + clientTP + "\r\n\r\n",
			wantApp: "GET /f HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 127.0.0.1\r\ntraceparent: " + ebbTP + "\r\n\r\n",
			wantN:   0, wantOK: true,
		},
	} {
		t.Run(name, func(t *testing.T) {
			app := startScriptApp(t, echoPath)
			addr, h := startTraceEngine(t, app.addr, ebbTP)
			cl := dial(t, addr)
			cl.send(tc.send)
			resp := cl.response("GET")
			if !strings.HasPrefix(resp, "HTTP/1.1 200 OK\r\n") {
				t.Fatalf("response %q", resp)
			}
			wantEq(t, "what the app received", tc.wantApp, app.received()[0])
			testwait.For(t, 5*time.Second, "the handler's record", func() bool { return h.served() > 0 })
			h.mu.Lock()
			if h.found[0] != tc.wantFound || h.counts[0] != tc.wantN || h.oks[0] != tc.wantOK {
				t.Errorf("TraceParent() = %q, %d; SetTraceParent = %v; want %q, %d; %v", h.found[0], h.counts[0], h.oks[0], tc.wantFound, tc.wantN, tc.wantOK)
			}
			h.mu.Unlock()
			e := &engine{addr: addr}
			fresh(t, e, "/next")
		})
	}
}

// TestStatusAndBegan: after RoundTrip the handler knows the status the
// client got, the app's or the engine's own, and when the head began.
func TestStatusAndBegan(t *testing.T) {
	app := startScriptApp(t, func(c net.Conn, req *http.Request) {
		if req.URL.Path == "/missing" {
			c.Write([]byte("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"))
			return
		}
		echoPath(c, req)
	})
	addr, h := startTraceEngine(t, app.addr, ebbTP)
	before := time.Now()
	cl := dial(t, addr)
	cl.send("GET /missing HTTP/1.1\r\nHost: h\r\n\r\n")
	cl.response("GET")
	cl.send("GET /ok HTTP/1.1\r\nHost: h\r\n\r\n")
	cl.response("GET")

	down, hd := startTraceEngine(t, "127.0.0.1:1", ebbTP) // nothing listens on port 1
	cd := dial(t, down)
	cd.send("GET /x HTTP/1.1\r\nHost: h\r\n\r\n")
	cd.response("GET")
	testwait.For(t, 5*time.Second, "the handlers' records", func() bool { return h.served() == 2 && hd.served() == 1 })

	h.mu.Lock()
	defer h.mu.Unlock()
	hd.mu.Lock()
	defer hd.mu.Unlock()
	if got := append(append([]int{}, h.codes...), hd.codes...); len(got) != 3 || got[0] != 404 || got[1] != 200 || got[2] != 502 {
		t.Errorf("Status() = %v, want [404 200 502]", got)
	}
	if h.began[0].Before(before) || h.began[1].Before(h.began[0]) || time.Since(h.began[0]) > 5*time.Second {
		t.Errorf("Began() = %v, want times after %v, in order", h.began, before)
	}
}
