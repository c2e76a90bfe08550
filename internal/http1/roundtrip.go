package http1

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"
)

const (
	// mergeMax bounds how much body is copied behind a head so that head and
	// body leave in one write.
	mergeMax = 8 << 10
	// bodyWait is how long a finished response waits for the request body to
	// finish uploading before the connections are given up (net/http's
	// Transport waits 50ms too).
	bodyWait = 50 * time.Millisecond
	// bigHead: a head (and inline body) above this gets a write deadline.
	bigHead = 16 << 10
	// clientCheck is how often a request waiting on the app (for its
	// response head, or for more of a streamed body) checks that its
	// client is still there.
	clientCheck = 100 * time.Millisecond
	// max1xx is how many 1xx responses (but 101) one request may get before
	// its final response; the next ends the exchange (net/http's Transport
	// had the same bound).
	max1xx = 5
)

var (
	// errClientGone: the client closed its connection while its request
	// waited on the app.
	errClientGone = errors.New("the client went away")
)

// ResponseTimeoutError is the error of a request whose app sent no
// response head within Options.ResponseHeaderTimeout; the client gets a 504.
type ResponseTimeoutError struct{ After time.Duration }

func (e *ResponseTimeoutError) Error() string {
	return fmt.Sprintf("no response head within %v", e.After)
}

// Timeouts are one request's own bounds (Conn.SetTimeouts), for a server
// whose requests differ (the activator serves many apps); zero fields take
// the Options'.
type Timeouts struct {
	// Request bounds the whole exchange, from RoundTrip's start to the end
	// of the response: a 504 (ResponseTimeoutError) when the response head
	// has not come by then, both connections closed when its body has not
	// ended. A 101's tunnel is not bounded by it (StreamIdle is). Zero:
	// none.
	Request time.Duration
	// ResponseHeader is Options.ResponseHeaderTimeout for this request.
	ResponseHeader time.Duration
	// StreamIdle is Options.TunnelIdleTimeout for this request: its tunnel
	// after a 101, and its response body, are cut (both connections
	// closed) when no byte has gone either way for this long.
	StreamIdle time.Duration
}

// SetTimeouts gives the current request bounds of its own. Call it from
// ServeRequest, before RoundTrip; they last for this request.
func (cc *Conn) SetTimeouts(t Timeouts) { cc.req.timeouts = t }

// OnUpstreamFailure makes RoundTrip answer with f's status code, header
// lines (each ending in CRLF) and body, instead of its own 502 or 504,
// when the upstream cannot be reached, answers garbage or does not answer
// in time, before anything of a response went to the client (the
// Handler's UpstreamError is still called, to log it). Call it from
// ServeRequest, before RoundTrip; it lasts for this request.
func (cc *Conn) OnUpstreamFailure(f func(err error) (code int, header, body string)) {
	cc.req.onFail = f
}

// responseHeaderTimeout is the current request's response-header timeout.
func (cc *Conn) responseHeaderTimeout() time.Duration {
	if d := cc.req.timeouts.ResponseHeader; d > 0 {
		return d
	}
	return cc.o.ResponseHeaderTimeout
}

// streamIdleTimeout is the current request's stream idle timeout.
func (cc *Conn) streamIdleTimeout() time.Duration {
	if d := cc.req.timeouts.StreamIdle; d > 0 {
		return d
	}
	return cc.o.TunnelIdleTimeout
}

// errStreamTimeout: a response body stalled past the stream idle timeout,
// or did not end within the request timeout.
var errStreamTimeout = errors.New("the response stalled past the stream idle timeout or outlasted the request timeout")

// RoundTrip sends the request to up and copies the response back to the
// client; it reports whether the client connection may carry another
// request. A 101 response turns the connection into a byte tunnel until
// both sides are done. A client that goes away while its request waits on
// the app ends the exchange (the connection to the app is closed).
func (cc *Conn) RoundTrip(up *Upstream, rq *Request) bool {
	// A request body that is already in the buffer and small goes out with
	// the head, in one write, and can be sent again on a fresh connection.
	inline := false
	if rq.cl > 0 && rq.cl <= mergeMax && int64(cc.br.Buffered()) >= rq.cl {
		body, _ := cc.br.Peek(int(rq.cl))
		cc.out = append(cc.out, body...)
		cc.br.Discard(int(rq.cl))
		inline = true
	}
	streamBody := rq.hasBody() && !inline
	if d := cc.req.timeouts.Request; d > 0 {
		cc.req.reqDeadline = time.Now().Add(d)
	}
	defer cc.upstream.Store(nil)
	var uc *upConn
	var rs response
	for attempt := 0; ; attempt++ {
		var reused bool
		var err error
		if attempt == 0 {
			uc, reused, err = up.get()
		} else {
			uc, err = up.dial()
		}
		if err != nil {
			return cc.upstreamFailed(up, rq, err)
		}
		cc.upstream.Store(uc.c)
		if len(cc.out) > bigHead {
			// A head this large may not fit the socket's buffers: an app
			// that does not read must not hold the request for ever.
			uc.c.SetWriteDeadline(time.Now().Add(cc.o.IdleTimeout))
		}
		_, err = uc.c.Write(cc.out)
		writeFailed := err != nil
		if err == nil && streamBody {
			cc.startRequestBody(uc.c, rq)
		}
		if err == nil {
			err = cc.readResponseHead(uc, rq, &rs)
			if err == nil {
				cc.req.status = rs.code
				if cc.req.onHead != nil {
					cc.req.onHead(rs.code)
				}
				if cc.req.farDeadline {
					uc.c.SetReadDeadline(time.Now().Add(clientCheck))
				}
				break
			}
		}
		uc.close()
		// A connection the app closed while it sat in the pool fails before
		// any byte of a response: send again if the request can be resent.
		if reused && attempt == 0 && !streamBody && !cc.req.sent1xx && (rq.idempotent || writeFailed) && isConnClosedErr(err) {
			continue
		}
		if err == errClientGone || cc.req.sent1xx { // nobody to answer, or too late for a 502
			cc.abortBody()
			return false
		}
		if streamBody {
			// Did the body go out whole (the app failed after it), break
			// the chunked framing (400), or is it still on its way?
			switch finished, bodyErr := cc.waitBodyFor(bodyWait); {
			case finished && errors.Is(bodyErr, errChunked):
				cc.writeError(400, "malformed chunked request body")
				return false
			case !finished || bodyErr != nil:
				cc.abortBody()
				return false
			}
		}
		return cc.upstreamFailed(up, rq, err)
	}

	keep := !rq.closeAfter && !cc.draining()
	if rs.code == 101 {
		if cc.waitBody() != nil {
			uc.close()
			return false
		}
		cc.tunnel(uc)
		return false
	}
	f := &cc.req.f
	switch {
	case rq.isHead || rs.code == 204 || rs.code == 304:
		f.reset(bodyNone, 0)
	case rs.chunked:
		f.reset(bodyChunked, 0)
	case rs.cl >= 0:
		f.reset(bodyLength, rs.cl)
	case rq.http10:
		f.reset(bodyClose, 0)
		keep = false
		rs.close = true
	default:
		// A body until the app closes goes to an HTTP/1.1 client chunked
		// (the head says HTTP/1.1 then), so that a cut shows: an app that
		// fails midway leaves the client without the last chunk, as nginx
		// and net/http do.
		f.reset(bodyClose, 0)
		f.rechunk = true
		rs.close = true
		cc.resp[7] = '1'
		cc.resp = appendFraming(cc.resp, true, -1)
	}
	if !keep {
		cc.resp = append(cc.resp, "Connection: close\r\n"...)
	}
	cc.resp = append(cc.resp, '\r', '\n')
	sent, err := cc.pump(cc.c, uc, cc.resp, f)
	cc.resp = cc.resp[:0]
	if err != nil {
		uc.close()
		if streamBody {
			cc.abortBody()
			return false
		}
		if !sent && !cc.req.sent1xx && err == errChunked {
			// Nothing of the response went out yet: still time for a 502.
			return cc.upstreamFailed(up, rq, errBadResponse)
		}
		if !sent && !cc.req.sent1xx && err == errStreamTimeout {
			// The request timeout passed between reading the app's head
			// and writing it: nothing went out, so the client still gets
			// its 504 rather than a closed connection.
			return cc.upstreamFailed(up, rq, &ResponseTimeoutError{After: cc.req.timeouts.Request})
		}
		return false
	}
	if streamBody {
		if finished, _ := cc.waitBodyFor(bodyWait); !finished {
			uc.close()
			cc.abortBody()
			return false
		}
		if cc.req.bodyErr != nil {
			uc.close()
			return false
		}
	}
	if reusable(rq, &rs) && !cc.req.earlyResponse {
		if streamBody || len(cc.out) > bigHead {
			uc.c.SetWriteDeadline(time.Time{}) // the next request's own
		}
		up.put(uc, cc.req.now)
	} else {
		uc.close()
	}
	return keep
}

// reusable reports whether the connection that carried a response may carry
// another request. Not when the app closes it, nor after a response that
// has no body by rule but whose head announced one (HEAD, 204, 304 with a
// Content-Length or chunked): an app that sends that body anyway, later,
// would have it read as the answer to someone else's request. (RoundTrip
// also drops a connection whose app answered before it had the whole
// request body: it may read the rest as its next request.)
func reusable(rq *Request, rs *response) bool {
	if rs.close || rq.http10 {
		return false
	}
	if rq.isHead || rs.code == 204 || rs.code == 304 {
		return !rs.chunked && rs.cl <= 0
	}
	return true
}

func isConnClosedErr(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) || isResetErr(err)
}

func isResetErr(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// awaitResponse waits until a whole response head from the app is in
// uc's buffer (or the buffer is full). Every clientCheck it checks that the
// client is still there; once the request body is sent,
// Options.ResponseHeaderTimeout runs, until *deadline (set then, and kept
// across the 1xx responses of one request). It leaves a read deadline on uc
// that pump renews.
func (cc *Conn) awaitResponse(uc *upConn, dl *time.Time) error {
	deadline := *dl
	defer func() { *dl = deadline }()
	for !headBuffered(uc.br) && uc.br.Buffered() < uc.br.Size() {
		now := time.Now()
		if rht := cc.responseHeaderTimeout(); deadline.IsZero() && rht > 0 && cc.bodyFinished() {
			deadline = now.Add(rht)
		}
		next := now.Add(clientCheck)
		if !deadline.IsZero() && deadline.Before(next) {
			next = deadline
		}
		if rd := cc.req.reqDeadline; !rd.IsZero() && rd.Before(next) {
			next = rd
		}
		uc.c.SetReadDeadline(next)
		_, err := uc.br.Peek(uc.br.Buffered() + 1)
		if err == nil {
			continue
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			if uc.br.Buffered() > 0 {
				return nil // a head cut short: its parser says how
			}
			return err
		}
		if !deadline.IsZero() && !time.Now().Before(deadline) {
			return &ResponseTimeoutError{After: cc.responseHeaderTimeout()}
		}
		if rd := cc.req.reqDeadline; !rd.IsZero() && !time.Now().Before(rd) {
			return &ResponseTimeoutError{After: cc.req.timeouts.Request}
		}
		if cc.clientGone() {
			return errClientGone
		}
	}
	if !cc.req.bodySent.Load() && !cc.bodyFinished() {
		cc.req.earlyResponse = true
	}
	if !headBuffered(uc.br) {
		// A head larger than the buffer: the rest within the response
		// deadline, or the idle timeout (RoundTrip brings the client checks
		// back for the body).
		if deadline.IsZero() {
			deadline = time.Now().Add(cc.o.IdleTimeout)
		}
		uc.c.SetReadDeadline(deadline)
		cc.req.farDeadline = true
	}
	return nil
}

// clientGone reports whether the client closed or reset its connection,
// from the socket alone: a pipelined request waiting in the buffer, or a
// request body still on its way to an app that does not read it, does not
// hide the close (the check reads nothing, so the body's goroutine may be
// reading meanwhile).
func (cc *Conn) clientGone() bool { return clientGone(cc.c) }

// headBuffered reports whether a whole head is in br's buffer.
func headBuffered(br *bufio.Reader) bool {
	b, _ := br.Peek(br.Buffered())
	// A head's lines end in CRLF or a bare LF: it ends with an empty line
	// after either.
	return bytes.Contains(b, []byte("\n\r\n")) || bytes.Contains(b, []byte("\n\n"))
}

// startRequestBody streams the request body from the client to the app in
// its own goroutine (the app may answer while it still reads); the outcome
// arrives on cc.req.body.
func (cc *Conn) startRequestBody(dst *net.TCPConn, rq *Request) {
	done := make(chan error, 1)
	cc.req.body = done
	cc.req.bodySent.Store(false)
	var f framing
	if rq.chunked {
		f.reset(bodyChunked, 0)
	} else {
		f.reset(bodyLength, rq.cl)
	}
	go func() {
		defer func() {
			if r := recover(); r != nil {
				dst.Close()
				done <- fmt.Errorf("panic copying a request body: %v", r)
			}
		}()
		err := cc.pumpRequestBody(dst, &f)
		if err != nil {
			dst.Close() // abort the exchange: the app must not wait for the rest
		}
		done <- err
	}()
}

// bodyFinished reports, without waiting, whether no request body is being
// streamed any more.
func (cc *Conn) bodyFinished() bool {
	if cc.req.body == nil {
		return true
	}
	select {
	case cc.req.bodyErr = <-cc.req.body:
		cc.req.body = nil
		return true
	default:
		return false
	}
}

// waitBodyFor waits up to d for the outcome of the request body being
// streamed; finished reports whether it came (or none was streamed).
func (cc *Conn) waitBodyFor(d time.Duration) (finished bool, err error) {
	if cc.req.body == nil {
		return true, cc.req.bodyErr
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case cc.req.bodyErr = <-cc.req.body:
		cc.req.body = nil
		return true, cc.req.bodyErr
	case <-t.C:
		return false, nil
	}
}

// abortBody ends the exchange: it closes the client connection and waits
// for the request body's goroutine, if any, to return.
func (cc *Conn) abortBody() {
	if cc.req.body != nil {
		cc.c.Close()
		cc.waitBody()
	}
}

// waitBody waits for the request body being streamed, if any, and returns
// its outcome.
func (cc *Conn) waitBody() error {
	if cc.req.body != nil {
		cc.req.bodyErr = <-cc.req.body
		cc.req.body = nil
	}
	return cc.req.bodyErr
}

// pumpRequestBody copies a request body from the client to the app; each
// blocking read from the client gets the idle timeout.
func (cc *Conn) pumpRequestBody(dst *net.TCPConn, f *framing) error {
	src := cc.br
	var buf *[]byte // the body re-framed, for a chunked one
	if f.kind == bodyChunked {
		buf = chunkBufs.Get().(*[]byte)
		defer chunkBufs.Put(buf)
	}
	for !f.done() {
		if src.Buffered() == 0 {
			cc.c.SetReadDeadline(time.Now().Add(cc.o.IdleTimeout))
			if _, err := src.Peek(1); err != nil {
				return err
			}
		}
		b, _ := src.Peek(src.Buffered())
		var n int
		var err error
		out := b
		if f.kind == bodyChunked {
			n, *buf, err = f.reframe(b, (*buf)[:0])
			out = *buf
		} else {
			n, err = f.consume(b)
			out = b[:n]
		}
		if len(out) > 0 {
			// An app that stops reading the body stalls the upload like a
			// client that stops sending it.
			dst.SetWriteDeadline(time.Now().Add(cc.o.IdleTimeout))
			if _, werr := dst.Write(out); werr != nil {
				return werr
			}
			if cc.req.timeouts.StreamIdle > 0 || cc.o.TunnelIdleTimeout > 0 {
				cc.req.upLast.Store(time.Now().UnixNano())
			}
		}
		src.Discard(n)
		if err != nil {
			return err
		}
	}
	cc.req.bodySent.Store(true) // before the outcome is sent: the app has it all
	return nil
}

// pump copies a response body framed by f from the app to the client,
// writing pre (the head) first; each piece is written as soon as it arrives
// (so streams are flushed as they come). While the app is silent it checks
// every clientCheck that the client is still there. sent reports whether
// anything was written to the client.
func (cc *Conn) pump(dst *net.TCPConn, uc *upConn, pre []byte, f *framing) (sent bool, err error) {
	src := uc.br
	pending := pre
	idle, rd := cc.streamIdleTimeout(), cc.req.reqDeadline
	last := time.Now() // of a byte from the app
	for !f.done() {
		if !rd.IsZero() && !time.Now().Before(rd) {
			return sent, errStreamTimeout
		}
		if src.Buffered() == 0 {
			if len(pending) > 0 {
				sent = true
				if err := cc.write(dst, pending); err != nil {
					return sent, err
				}
				pending = nil
			}
			for {
				_, err := src.Peek(1)
				if err == nil {
					break
				}
				if f.kind == bodyClose && err == io.EOF {
					f.kind = bodyNone
					break
				}
				if !errors.Is(err, os.ErrDeadlineExceeded) {
					return sent, err
				}
				if cc.clientGone() {
					return sent, errClientGone
				}
				if cc.streamExpired(time.Now(), last, idle, rd) {
					return sent, errStreamTimeout
				}
				uc.c.SetReadDeadline(time.Now().Add(clientCheck))
			}
			if f.done() {
				break
			}
			cc.req.now = time.Now() // a stream: keep the write deadline moving
			last = cc.req.now
		}
		b, _ := src.Peek(src.Buffered())
		var n int
		var err error
		var piece []byte
		switch {
		case f.kind == bodyChunked:
			n, cc.chunk, err = f.reframe(b, cc.chunk[:0])
			piece = cc.chunk
		case f.rechunk:
			n, err = f.consume(b)
			cc.chunk = appendChunk(cc.chunk[:0], b[:n])
			piece = cc.chunk
		default:
			n, err = f.consume(b)
			piece = b[:n]
		}
		if err != nil {
			return sent, err
		}
		if len(pending)+len(piece) <= mergeMax && pending != nil {
			pending = append(pending, piece...)
			cc.resp = pending // keep the grown buffer
		} else {
			sent = true
			if len(pending) > 0 {
				if err := cc.write(dst, pending); err != nil {
					return sent, err
				}
				pending = nil
			}
			if len(piece) > 0 {
				if err := cc.write(dst, piece); err != nil {
					return sent, err
				}
			}
		}
		src.Discard(n)
	}
	if f.rechunk {
		if pending != nil {
			pending = append(pending, lastChunk...)
			cc.resp = pending
		} else {
			pending = lastChunk
		}
	}
	if len(pending) > 0 {
		return true, cc.write(dst, pending)
	}
	return sent, nil
}

// streamExpired reports whether, at now, a response body whose last byte
// from the app came at last has outlasted the request timeout's deadline
// rd, or has had no byte either way (the request body's included) for
// idle.
func (cc *Conn) streamExpired(now, last time.Time, idle time.Duration, rd time.Time) bool {
	if !rd.IsZero() && !now.Before(rd) {
		return true
	}
	if idle <= 0 {
		return false
	}
	if up := cc.req.upLast.Load(); up > last.UnixNano() {
		last = time.Unix(0, up)
	}
	return now.Sub(last) >= idle
}

// chunkBufs hold request bodies re-framed on their way to the app (the
// response's are in Conn.chunk: both may be under way at once).
var chunkBufs = sync.Pool{New: func() any { b := make([]byte, 0, clientBufSize+64); return &b }}

// lastChunk ends a chunked body without trailers.
var lastChunk = []byte("0\r\n\r\n")

// appendChunk appends data framed as one chunk (nothing for no data: that
// would be the last chunk).
func appendChunk(b, data []byte) []byte {
	if len(data) == 0 {
		return b
	}
	b = strconv.AppendUint(b, uint64(len(data)), 16)
	b = append(b, '\r', '\n')
	b = append(b, data...)
	return append(b, '\r', '\n')
}

// write writes b to dst; writes to the client carry the idle timeout,
// renewed when half of it is used up so that not every write pays for it.
func (cc *Conn) write(dst *net.TCPConn, b []byte) error {
	if dst == cc.c {
		timeout := cc.o.IdleTimeout
		if cc.wdl.Sub(cc.req.now) < timeout/2 {
			cc.wdl = time.Now().Add(timeout)
			cc.c.SetWriteDeadline(cc.wdl)
		}
	}
	_, err := dst.Write(b)
	return err
}

// upstreamFailed answers 502 because the upstream could not be reached or
// answered garbage, or 504 because it did not answer in time.
func (cc *Conn) upstreamFailed(up *Upstream, rq *Request, err error) bool {
	code := 502
	var te *ResponseTimeoutError
	if errors.As(err, &te) {
		code = 504
	}
	keep := code == 502 && !rq.hasBody() && !rq.closeAfter && !cc.draining()
	msg := cc.h.UpstreamError(up, err) + "\n"
	header := ""
	if f := cc.req.onFail; f != nil {
		code, header, msg = f(err)
		keep = !rq.hasBody() && !rq.closeAfter && !cc.draining()
	}
	cc.writeResponse(code, header, msg, keep)
	if !keep {
		cc.closeGently()
	}
	return keep
}
