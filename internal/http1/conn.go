package http1

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

const (
	clientBufSize = 4 << 10
	// maxBlankLines is how many empty lines may precede a request line
	// (RFC 9112 section 2.2 asks servers to ignore at least one).
	maxBlankLines = 4
)

var clientReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, clientBufSize) }}

// Options tune the engine; every connection of a server shares them.
type Options struct {
	// Name prefixes the bodies of the answers the engine writes itself
	// ("ebb-sidecar").
	Name string
	// HeaderTimeout bounds the reading of a request head once its first
	// byte arrived.
	HeaderTimeout time.Duration
	// IdleTimeout closes idle keep-alive connections and bounds each read
	// of a stalled request body from the client, each write of it to the
	// app and each write of a response to the client. (A response body the
	// app is slow to send is not cut: its client is checked instead.)
	IdleTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for the app's response head
	// once the request (body included) is sent; 504 after it. Zero waits
	// as long as the client stays.
	ResponseHeaderTimeout time.Duration
	// TunnelIdleTimeout closes a tunnel (after a 101) in which no byte went
	// either way for this long, and cuts a response body (both connections
	// closed) that long without a byte either way. Zero: never. A request
	// may have its own (Conn.SetTimeouts).
	TunnelIdleTimeout time.Duration
	// HalfCloseTimeout: once one side of a tunnel has closed its half (a
	// FIN; the other side gets it), the tunnel closes whole when the other
	// side sends nothing for this long (HAProxy's "timeout client-fin").
	// A side that resets or cannot be written to ends the tunnel at once.
	// Zero: DefaultHalfCloseTimeout.
	HalfCloseTimeout time.Duration
	// MaxHeaderBytes: larger request heads get 431.
	MaxHeaderBytes int
	// KeepRaw keeps each request head as received so that Conn.HandOff can
	// give the connection, request included, to another server.
	KeepRaw bool
}

// Handler is what a server built on the engine decides for each request.
type Handler interface {
	// ServeRequest serves one request whose head was parsed: it returns
	// c.RoundTrip(up, rq), or c.HandOff() to give the connection away. It
	// reports whether the connection may carry another request.
	ServeRequest(c *Conn, rq *Request) bool
	// UpstreamError returns the body of the 502 (or, for a
	// *ResponseTimeoutError, 504) answered when up could not be reached,
	// answered garbage or did not answer in time; it counts or logs it.
	UpstreamError(up *Upstream, err error) string
}

// Conn is one client connection served by the HTTP/1.1 engine. Its fields
// last as long as the connection; everything about the request being
// served is in req, which Serve zeroes before each request.
type Conn struct {
	o       *Options
	h       Handler
	s       *Server // nil in parser tests
	c       *net.TCPConn
	br      *bufio.Reader
	out     []byte // request head (and small body) for the app
	resp    []byte // response head (and small body) for the client
	chunk   []byte // a piece of a body until close, framed as a chunk
	line    []byte // scratch for header lines longer than a reader's buffer
	handoff net.Conn
	ip      []byte    // client IP, computed once
	wdl     time.Time // current write deadline of the client connection
	// upstream is the app connection of the exchange under way, for
	// Server.Close (which reads it from another goroutine).
	upstream atomic.Pointer[net.TCPConn]
	served   int     // requests served on this connection
	req      request // the request being served
	// parkThen is Park's callback, called once Serve's goroutine let go.
	parkThen func(*Parked)
}

// request is the state of the request a Conn is serving, from the wait for
// its first byte to the end of its response. Serve zeroes all of it at once
// before each request (reset), so that nothing of one request can leak into
// the next; only the capacity of its buffers is kept.
type request struct {
	// rq is the parsed head. In the Conn, not on the stack: passed through
	// the Handler interface, it would escape (one allocation per request).
	rq     Request
	now    time.Time // when the head began; moved on by 1xx responses and streams, for write deadlines
	host   []byte    // Host header value
	target [2]int    // the request target in Conn.out
	raw    []byte    // the head as received, with Options.KeepRaw
	xff    []byte    // X-Forwarded-For values
	hop    []byte    // hop-by-hop header names to drop, comma separated (of the request head, then of each response head)
	f      framing   // the response body's
	status int       // status code of the response to the client; 0: none yet
	// sent1xx: a 1xx response went out.
	sent1xx bool
	// farDeadline: the read deadline on the app's connection is the
	// response-header timeout's, not the next client check's.
	farDeadline bool
	// earlyResponse: the app's response head came before the request body
	// was sent whole.
	earlyResponse bool
	// bodySent: the streamed request body was written whole to the app
	// (stored by the body's goroutine, which always ends before the next
	// request: RoundTrip waits for it).
	bodySent atomic.Bool
	body     chan error // the outcome of the request body being streamed, until received
	bodyErr  error
	onHead   func(status int) // OnResponseHead
	// timeouts are the request's own (SetTimeouts); reqDeadline is the end
	// of its Timeouts.Request, from RoundTrip's start.
	timeouts    Timeouts
	reqDeadline time.Time
	// upLast is when a byte of the streamed request body last went to the
	// app (unix nanos), for Timeouts.StreamIdle.
	upLast atomic.Int64
	onFail func(err error) (code int, header, body string) // OnUpstreamFailure
}

// reset zeroes r for the next request, keeping its buffers' capacity.
func (r *request) reset() {
	*r = request{host: r.host[:0], raw: r.raw[:0], xff: r.xff[:0], hop: r.hop[:0]}
}

// newConn returns the engine for client connection c; call Serve, then
// release.
func newConn(c *net.TCPConn, s *Server) *Conn {
	br := clientReaders.Get().(*bufio.Reader)
	br.Reset(c)
	cc := &Conn{o: &s.opts, h: s.h, s: s, c: c, br: br, out: make([]byte, 0, 512), resp: make([]byte, 0, 512)}
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		cc.ip = a.AddrPort().Addr().Unmap().AppendTo(nil)
	}
	return cc
}

// NetConn is the client connection.
func (cc *Conn) NetConn() *net.TCPConn { return cc.c }

// release returns the connection's buffers once Serve returned.
func (cc *Conn) release() {
	cc.br.Reset(nil)
	clientReaders.Put(cc.br)
	cc.br = nil
}

// Serve runs the connection's request loop. It returns a connection to
// hand over to another server (h2c prior knowledge, or Conn.HandOff), with
// what was already read put back in front, or nil when the connection is
// done.
func (cc *Conn) Serve() net.Conn {
	for {
		cc.req.reset()
		if !cc.waitRequest() {
			return nil
		}
		code, err := cc.readRequest()
		if err != nil {
			if err == errH2Preface && cc.served == 0 {
				return cc.handOffH2()
			}
			if code != 0 {
				cc.writeError(code, err.Error())
			}
			return nil
		}
		cc.served++
		if !cc.h.ServeRequest(cc, &cc.req.rq) {
			return cc.handoff
		}
	}
}

// waitRequest waits, within the idle timeout, for the first byte of the next
// request and then gives the client the header timeout to send the rest.
func (cc *Conn) waitRequest() bool {
	cc.req.now = time.Now()
	if cc.br.Buffered() == 0 {
		// Deadline first: a stopping server may set an earlier one right
		// after setIdle.
		cc.c.SetReadDeadline(cc.req.now.Add(cc.o.IdleTimeout))
		if !cc.s.setIdle(cc, true) {
			return false
		}
		_, err := cc.br.Peek(1)
		if !cc.s.setIdle(cc, false) || err != nil {
			return false
		}
		cc.req.now = time.Now()
	}
	cc.c.SetReadDeadline(cc.req.now.Add(cc.o.HeaderTimeout))
	return true
}

// draining reports whether responses close their connection.
func (cc *Conn) draining() bool { return cc.s != nil && cc.s.Draining() }

// handOffH2 returns the connection, with what was already read put back in
// front, for an h2c server. Its read deadline stays the head's: the rest of
// the preface gets no more time than any request head, and the h2c server
// lifts it once it has read what it needs (the sidecar: the preface and
// the first frame).
func (cc *Conn) handOffH2() net.Conn {
	c := cc.detach([]byte("PRI * HTTP/2.0\r\n"))
	cc.c.SetReadDeadline(cc.req.now.Add(cc.o.HeaderTimeout))
	return c
}

// HandOff ends the engine's service of the connection: Serve then returns
// it with the current request head as received (Options.KeepRaw must be
// set) and everything read after it put back in front, for another server
// to serve. It returns false, for ServeRequest to return.
func (cc *Conn) HandOff() bool {
	cc.handoff = cc.detach(cc.req.raw)
	return false
}

func (cc *Conn) detach(head []byte) net.Conn {
	buffered, _ := cc.br.Peek(cc.br.Buffered())
	prefix := make([]byte, 0, len(head)+len(buffered))
	prefix = append(prefix, head...)
	prefix = append(prefix, buffered...)
	cc.br.Discard(len(buffered))
	cc.c.SetReadDeadline(time.Time{})
	cc.c.SetWriteDeadline(time.Time{})
	return &prefixConn{TCPConn: cc.c, prefix: prefix}
}

// Host is the request's Host header value (empty without one).
func (cc *Conn) Host() []byte { return cc.req.host }

// Status is the status code of the response the current request got (the
// app's, or the engine's own error); 0 if none went out. Read it after
// RoundTrip.
func (cc *Conn) Status() int { return cc.req.status }

// Began is when the current request's head began to arrive.
func (cc *Conn) Began() time.Time { return cc.req.now }

// Target is the request target as received.
func (cc *Conn) Target() []byte { return cc.out[cc.req.target[0]:cc.req.target[1]] }

// readLine returns the next line without its line ending (CRLF, or a bare
// LF as RFC 9112 section 2.2 allows in a head), valid until the next read.
// budget is what is left of the head's size limit.
func readLine(br *bufio.Reader, scratch *[]byte, budget *int, tooLarge error) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		buf := append((*scratch)[:0], line...)
		for err == bufio.ErrBufferFull {
			if len(buf) > *budget {
				*scratch = buf[:0]
				return nil, tooLarge
			}
			line, err = br.ReadSlice('\n')
			buf = append(buf, line...)
		}
		*scratch = buf[:0]
		line = buf
	}
	if err != nil {
		return nil, err
	}
	*budget -= len(line)
	if *budget < 0 {
		return nil, tooLarge
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, nil
}

// writeError answers a request the engine refuses and closes the
// connection gently: it half-closes and reads what the client still sends
// for a while, so that the kernel does not reset the connection (and lose
// the answer) because of unread bytes.
func (cc *Conn) writeError(code int, msg string) {
	cc.writeResponse(code, "", cc.o.Name+": "+msg+"\n", false)
	cc.closeGently()
}

func (cc *Conn) closeGently() {
	cc.c.CloseWrite()
	cc.c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	io.Copy(io.Discard, io.LimitReader(cc.c, 256<<10))
}

// writeResponse writes the engine's own response: code, the header lines
// in header (each ending in CRLF), text/plain, body (none to a HEAD).
func (cc *Conn) writeResponse(code int, header, body string, keep bool) {
	cc.req.status = code
	b := appendAnswer(cc.resp[:0], code, header, body, keep, cc.req.rq.isHead)
	cc.c.SetWriteDeadline(time.Now().Add(cc.o.HeaderTimeout))
	cc.wdl = time.Time{}
	cc.c.Write(b)
	cc.resp = b[:0]
}

// appendAnswer appends to b a response of the engine's own making: the
// status line, the header lines in header (each ending in CRLF; a
// Content-Type among them, or text/plain is sent), the framing and the
// body. A 1xx, 204 or 304 has no body by rule (RFC 9110 section 6.4.1,
// RFC 9112 section 6.3): none goes out, nor a Content-Length, whatever body
// says; a HEAD's answer has the Content-Length its GET would have and no
// body. Bytes after such a head would be read as the next response on
// the connection.
func appendAnswer(b []byte, code int, header, body string, keep, head bool) []byte {
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(code), 10)
	b = append(b, ' ')
	b = append(b, http.StatusText(code)...)
	b = append(b, "\r\n"...)
	b = append(b, header...)
	if !containsFold([]byte(header), "content-type:") {
		b = append(b, "Content-Type: text/plain; charset=utf-8\r\n"...)
	}
	noBody := code < 200 || code == http.StatusNoContent || code == http.StatusNotModified
	if !noBody {
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, int64(len(body)), 10)
		b = append(b, "\r\n"...)
	}
	if !keep {
		b = append(b, "Connection: close\r\n"...)
	}
	b = append(b, "\r\n"...)
	if !head && !noBody {
		b = append(b, body...)
	}
	return b
}

// prefixConn replays bytes already read before reading from the connection.
type prefixConn struct {
	*net.TCPConn
	prefix []byte
}

func (c *prefixConn) Read(b []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(b, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.TCPConn.Read(b)
}

// WriteTo keeps io.Copy from bypassing the prefix through TCPConn.WriteTo.
func (c *prefixConn) WriteTo(w io.Writer) (int64, error) {
	return io.Copy(w, struct{ io.Reader }{c})
}

var errH2Preface = errors.New("h2c prior knowledge")
