package http1

import (
	"bufio"
	"bytes"
	"net"
	"time"
)

// Park suspends the request being served without answering it, for a
// component that holds requests (the activator, while an app has no ready
// pod): ServeRequest returns cc.Park(then). Once the connection's goroutine
// has let go of cc, the engine calls then, in that goroutine, as its last
// act, with the request parked; the caller then calls Resume or Drop on it
// exactly once.
//
// A parked request costs no goroutine and reads nothing from its socket:
// it keeps the parsed request, its head for the app (built as for any
// request: one parse, framing re-emitted from what was parsed) and the
// bytes already read past the head (a body's start, a pipelined request),
// in a Parked of about 160 bytes; the Conn and its buffers are let go.
// Watching for the client's hang-up meanwhile is the caller's (NetConn).
func (cc *Conn) Park(then func(*Parked)) bool {
	cc.parkThen = then
	return false
}

// ParkSize is about how many bytes the current request keeps while
// parked: its head for the app, its host and the bytes read past the head,
// which a Parked holds beside its fixed 160 bytes. A component that parks
// many requests bounds their sum with it.
func (cc *Conn) ParkSize() int {
	return len(cc.out) + len(cc.req.host) + cc.br.Buffered()
}

// Parked is a request parked by Conn.Park, with its connection.
type Parked struct {
	c       *net.TCPConn
	s       *Server
	out     []byte // the head for the app
	host    []byte
	ip      []byte
	pending []byte // bytes read past the head
	rq      Request
	target  [2]int
	served  int
}

// park keeps what the parked request needs (the head for the app at its
// size, not its buffer's) and lets go of the rest: the read buffer (the
// bytes buffered past the head are kept aside), the Conn and its scratch
// buffers, the raw head (a parked request is never handed off).
func (cc *Conn) park() *Parked {
	p := &Parked{c: cc.c, s: cc.s, out: bytes.Clone(cc.out), host: bytes.Clone(cc.req.host), ip: cc.ip, rq: cc.req.rq, target: cc.req.target, served: cc.served}
	if n := cc.br.Buffered(); n > 0 {
		b, _ := cc.br.Peek(n)
		p.pending = bytes.Clone(b)
	}
	cc.release()
	return p
}

// NetConn is the parked request's client connection.
func (p *Parked) NetConn() *net.TCPConn { return p.c }

// Resume serves a parked request again, in the calling goroutine: serve
// answers it (RoundTrip, Answer, or Park again), and the connection then
// goes on as Serve would, with its next requests, until it closes or is
// handed off. It counts among the server's connections again (Stop, Close
// and the drain apply to it) but not among those Shutdown waits for: the
// caller waits for Resume to return.
func (p *Parked) Resume(serve func(*Conn, *Request) bool) {
	s := p.s
	br := clientReaders.Get().(*bufio.Reader)
	if len(p.pending) == 0 {
		br.Reset(p.c)
	} else {
		// They fit: they came from a buffer of the same size.
		br.Reset(&prefixConn{TCPConn: p.c, prefix: p.pending})
		br.Peek(len(p.pending))
	}
	cc := &Conn{o: &s.opts, h: s.h, s: s, c: p.c, br: br, out: p.out, resp: make([]byte, 0, 512), ip: p.ip, served: p.served}
	cc.req.rq, cc.req.host, cc.req.target = p.rq, p.host, p.target
	cc.req.now = time.Now()
	s.mu.Lock()
	s.live[cc] = false
	s.open.Add(1)
	s.mu.Unlock()
	s.run(cc, func() net.Conn {
		if !serve(cc, &cc.req.rq) {
			return cc.handoff
		}
		return cc.Serve()
	})
}

// Drop closes a parked request's connection; the request gets no answer.
func (p *Parked) Drop() {
	p.c.Close()
	p.out, p.pending = nil, nil
}

// Answer answers the current request with the engine's own response:
// code, the header lines in header (each ending in CRLF; a Content-Type
// among them, or text/plain is sent), and body: none to a HEAD, and no
// body nor Content-Length with a 1xx, 204 or 304 (appendAnswer). It reports whether the
// connection may carry another request: not when the client asked to
// close, nor during a drain, nor when the request has a body that has not
// all arrived yet (one that has is discarded); the connection is then
// closed gently, so that the answer is read.
func (cc *Conn) Answer(code int, header, body string) bool {
	rq := &cc.req.rq
	keep := !rq.closeAfter && !cc.draining() && cc.discardBuffered(rq)
	cc.req.status = code
	b := appendAnswer(cc.resp[:0], code, header, body, keep, rq.isHead)
	cc.c.SetWriteDeadline(time.Now().Add(cc.o.HeaderTimeout))
	cc.wdl = time.Time{}
	cc.c.Write(b)
	cc.resp = b[:0]
	if !keep {
		cc.closeGently()
	}
	return keep
}

// AnswerWith answers the current request with bytes of the caller's own
// making (a precomputed answer): appendTo appends the whole response to
// b, told whether the request is a HEAD (no body goes out) and whether the
// connection stays open (else it must say "Connection: close"), decided
// as for Answer. It reports whether the connection may carry another
// request; the status code for Status is code.
func (cc *Conn) AnswerWith(code int, appendTo func(b []byte, head, keep bool) []byte) bool {
	rq := &cc.req.rq
	keep := !rq.closeAfter && !cc.draining() && cc.discardBuffered(rq)
	cc.req.status = code
	b := appendTo(cc.resp[:0], rq.isHead, keep)
	cc.c.SetWriteDeadline(time.Now().Add(cc.o.HeaderTimeout))
	cc.wdl = time.Time{}
	cc.c.Write(b)
	cc.resp = b[:0]
	if !keep {
		cc.closeGently()
	}
	return keep
}

// discardBuffered consumes the request's body if all of it is in the read
// buffer already; false if some of it has not arrived (or is malformed).
func (cc *Conn) discardBuffered(rq *Request) bool {
	if !rq.hasBody() {
		return true
	}
	var f framing
	if rq.chunked {
		f.reset(bodyChunked, 0)
	} else {
		f.reset(bodyLength, rq.cl)
	}
	b, _ := cc.br.Peek(cc.br.Buffered())
	n, err := f.consume(b)
	if err != nil || !f.done() {
		return false
	}
	cc.br.Discard(n)
	return true
}

// containsFold reports whether b contains s (lower case), ignoring case.
func containsFold(b []byte, s string) bool {
	for i := 0; i+len(s) <= len(b); i++ {
		if eqFold(b[i:i+len(s)], s) {
			return true
		}
	}
	return false
}

// Method is the request's method.
func (cc *Conn) Method() []byte {
	if i := bytes.IndexByte(cc.out, ' '); i > 0 {
		return cc.out[:i]
	}
	return nil
}

// Header returns the value of the last header line called name (lower
// case) in the head for the app, and how many there are. The value is the
// head's own bytes, valid until the next change of the head or RoundTrip.
func (cc *Conn) Header(name string) (value []byte, n int) {
	_, value, n = cc.findHeader(name)
	return value, n
}

// OnResponseHead makes RoundTrip call f with the final response's status
// (or 101) as its head arrives from the app, before it goes to the client.
// Call it from ServeRequest, before RoundTrip; it lasts for this request.
func (cc *Conn) OnResponseHead(f func(status int)) { cc.req.onHead = f }
