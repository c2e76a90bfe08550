package http1

import (
	"bufio"
	"bytes"
	"net"
	"net/http"
	"strconv"
	"time"
)

// Park suspends the request being served without answering it, for a
// component that holds requests (the activator, while an app has no ready
// pod): ServeRequest returns cc.Park(then). Once the connection's goroutine
// has let go of cc, the engine calls then(cc), in that goroutine, as its
// last act; from then on cc belongs to the caller, who calls Resume or Drop
// on it exactly once.
//
// A parked Conn costs no goroutine and reads nothing from its socket: it
// keeps the parsed request, its head for the app (built as for any
// request: one parse, framing re-emitted from what was parsed) and the
// bytes already read past the head (a body's start, a pipelined request);
// its read buffer goes back to the pool. Watching for the client's
// hang-up meanwhile is the caller's (NetConn).
func (cc *Conn) Park(then func(*Conn)) bool {
	cc.parkThen = then
	return false
}

// suspend lets go of what a parked Conn does not need: its read buffer
// (the bytes buffered past the head are kept aside), its scratch buffers,
// the raw head (a parked request is never handed off) and the spare
// capacity of the head for the app.
func (cc *Conn) suspend() {
	if n := cc.br.Buffered(); n > 0 {
		b, _ := cc.br.Peek(n)
		cc.pending = bytes.Clone(b)
	}
	cc.release()
	cc.resp, cc.chunk, cc.line = nil, nil, nil
	cc.req.raw, cc.req.xff = nil, nil
	cc.out = bytes.Clone(cc.out)
}

// unsuspend gives a resumed Conn a read buffer again, holding the bytes
// kept aside (they fit: they came from a buffer of the same size).
func (cc *Conn) unsuspend() {
	br := clientReaders.Get().(*bufio.Reader)
	if len(cc.pending) == 0 {
		br.Reset(cc.c)
	} else {
		br.Reset(&pendingReader{pending: cc.pending, c: cc.c})
		br.Peek(len(cc.pending))
		cc.pending = nil
	}
	cc.br = br
	cc.req.now = time.Now()
}

// pendingReader reads the bytes a parked Conn kept aside, then its socket.
type pendingReader struct {
	pending []byte
	c       *net.TCPConn
}

func (r *pendingReader) Read(b []byte) (int, error) {
	if len(r.pending) > 0 {
		n := copy(b, r.pending)
		r.pending = r.pending[n:]
		return n, nil
	}
	return r.c.Read(b)
}

// Resume serves a parked Conn again, in the calling goroutine: serve
// answers the parked request (RoundTrip, Answer, or Park again), and the
// connection then goes on as Serve would, with its next requests, until
// it closes or is handed off. The Conn counts among the server's
// connections again (Stop, Close and the drain apply to it) but not among
// those Shutdown waits for: the caller waits for Resume to return.
func (cc *Conn) Resume(serve func(*Conn, *Request) bool) {
	s := cc.s
	s.mu.Lock()
	s.live[cc] = false
	s.open.Add(1)
	s.mu.Unlock()
	cc.unsuspend()
	s.run(cc, func() net.Conn {
		if !serve(cc, &cc.req.rq) {
			return cc.handoff
		}
		return cc.Serve()
	})
}

// Drop closes a parked Conn's connection; its request gets no answer.
func (cc *Conn) Drop() {
	cc.pending = nil
	cc.c.Close()
}

// Answer answers the current request with the engine's own response:
// code, the header lines in header (each ending in CRLF; a Content-Type
// among them, or text/plain is sent), and body. It reports whether the
// connection may carry another request: not when the client asked to
// close, nor during a drain, nor when the request has a body that has not
// all arrived yet (one that has is discarded); the connection is then
// closed gently, so that the answer is read.
func (cc *Conn) Answer(code int, header, body string) bool {
	rq := &cc.req.rq
	keep := !rq.closeAfter && !cc.draining() && cc.discardBuffered(rq)
	cc.req.status = code
	b := cc.resp[:0]
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(code), 10)
	b = append(b, ' ')
	b = append(b, http.StatusText(code)...)
	b = append(b, "\r\n"...)
	b = append(b, header...)
	if !containsFold([]byte(header), "content-type:") {
		b = append(b, "Content-Type: text/plain; charset=utf-8\r\n"...)
	}
	b = append(b, "Content-Length: "...)
	b = strconv.AppendInt(b, int64(len(body)), 10)
	if !keep {
		b = append(b, "\r\nConnection: close"...)
	}
	b = append(b, "\r\n\r\n"...)
	if !rq.isHead {
		b = append(b, body...)
	}
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
