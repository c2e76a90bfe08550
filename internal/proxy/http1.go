package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"syscall"
	"time"
)

const (
	clientBufSize = 4 << 10
	// mergeMax bounds how much body is copied behind a head so that head and
	// body leave in one write.
	mergeMax = 8 << 10
	// maxResponseHead bounds the response head read from the app.
	maxResponseHead = 1 << 20
	// bodyWait is how long a finished response waits for the request body to
	// finish uploading before the connections are given up (net/http's
	// Transport waits 50ms too).
	bodyWait = 50 * time.Millisecond
)

var (
	errHeaderTooLarge = errors.New("request head too large")
	errH2Preface      = errors.New("h2c prior knowledge")
	errBadResponse    = errors.New("malformed response from the app")
)

var clientReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, clientBufSize) }}

// Request is what the engine knows about one request head; it is valid
// while the Handler serves it.
type Request struct {
	http10     bool
	isHead     bool
	chunked    bool
	closeAfter bool // the client asked to close, or spoke HTTP/1.0
	upgrade    bool // Connection: upgrade and an Upgrade header
	hasUpgrade bool
	probe      bool
	idempotent bool // GET, HEAD, OPTIONS or TRACE
	host       bool
	extraHop   bool // Connection names other headers to drop
	cl         int64
}

func (rq *Request) hasBody() bool { return rq.chunked || rq.cl > 0 }

// Probe reports whether the User-Agent starts with "kube-probe/".
func (rq *Request) Probe() bool { return rq.probe }

// response is what the proxy needs to know about one response head.
type response struct {
	code          int
	cl            int64
	chunked       bool
	upstreamClose bool
}

// Options tune the engine; every connection of a server shares them.
type Options struct {
	// Name prefixes the bodies of the answers the engine writes itself
	// ("ebb-sidecar").
	Name string
	// HeaderTimeout bounds the reading of a request head once its first
	// byte arrived.
	HeaderTimeout time.Duration
	// IdleTimeout closes idle keep-alive connections and bounds each read
	// and write of a stalled body.
	IdleTimeout time.Duration
	// MaxHeaderBytes: larger request heads get 431.
	MaxHeaderBytes int
	// KeepRaw keeps each request head as received so that Conn.HandOff can
	// give the connection, request included, to another server.
	KeepRaw bool
	// Forwarded sets X-Forwarded-Host and X-Forwarded-Proto (http) and drops
	// the client's Forwarded, X-Forwarded-Host and X-Forwarded-Proto, as
	// httputil.ProxyRequest.SetXForwarded does; X-Forwarded-For is appended
	// to either way.
	Forwarded bool
}

// Handler is what a server built on the engine decides.
type Handler interface {
	// ServeRequest serves one request whose head was parsed: it returns
	// c.RoundTrip(up, rq), or c.HandOff() to give the connection away. It
	// reports whether the connection may carry another request.
	ServeRequest(c *Conn, rq *Request) bool
	// SetIdle marks c as waiting for a request head (or not); false means
	// the server stops and c should close.
	SetIdle(c *Conn, idle bool) bool
	// Draining reports whether responses should close their connection.
	Draining() bool
	// BadGateway returns the body of the 502 answered when up could not be
	// reached or answered garbage (and counts or logs it).
	BadGateway(up *Upstream, err error) string
}

// Conn is one client connection served by the HTTP/1.1 engine.
type Conn struct {
	o       *Options
	h       Handler
	c       *net.TCPConn
	br      *bufio.Reader
	out     []byte // request head (and small body) for the app
	resp    []byte // response head (and small body) for the client
	line    []byte // scratch for header lines longer than br's buffer
	raw     []byte // the request head as received, with Options.KeepRaw
	host    []byte // Host header value of the request
	target  [2]int // the request target in out
	handoff net.Conn
	rq      Request
	xff     []byte // X-Forwarded-For values of the request
	hop     []byte // extra hop-by-hop header names, comma separated
	ip      []byte // client IP, computed once
	f       framing
	now     time.Time
	wdl     time.Time // current write deadline
	sent1xx bool      // a 1xx response of the current request went out
	req     int       // requests served on this connection
}

// NewConn returns the engine for client connection c; call Serve, then
// Release.
func NewConn(c *net.TCPConn, o *Options, h Handler) *Conn {
	br := clientReaders.Get().(*bufio.Reader)
	br.Reset(c)
	cc := &Conn{o: o, h: h, c: c, br: br, out: make([]byte, 0, 512), resp: make([]byte, 0, 512)}
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		cc.ip = a.AddrPort().Addr().Unmap().AppendTo(nil)
	}
	return cc
}

// NetConn is the client connection.
func (cc *Conn) NetConn() *net.TCPConn { return cc.c }

// Release returns the connection's buffers; call it once Serve returned.
func (cc *Conn) Release() {
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
		if !cc.waitRequest() {
			return nil
		}
		// In the Conn, not on the stack: passed through the Handler
		// interface, it would escape (one allocation per request).
		rq := &cc.rq
		*rq = Request{}
		code, err := cc.readRequest(rq)
		if err != nil {
			if err == errH2Preface && cc.req == 0 {
				return cc.handOffH2()
			}
			if code != 0 {
				cc.writeError(code, err.Error())
			}
			return nil
		}
		cc.req++
		if !cc.h.ServeRequest(cc, rq) {
			return cc.handoff
		}
	}
}

// waitRequest waits, within the idle timeout, for the first byte of the next
// request and then gives the client the header timeout to send the rest.
func (cc *Conn) waitRequest() bool {
	cc.now = time.Now()
	if cc.br.Buffered() == 0 {
		// Deadline first: a stopping server may set an earlier one right
		// after SetIdle.
		cc.c.SetReadDeadline(cc.now.Add(cc.o.IdleTimeout))
		if !cc.h.SetIdle(cc, true) {
			return false
		}
		_, err := cc.br.Peek(1)
		if !cc.h.SetIdle(cc, false) || err != nil {
			return false
		}
		cc.now = time.Now()
	}
	cc.c.SetReadDeadline(cc.now.Add(cc.o.HeaderTimeout))
	return true
}

// handOffH2 returns the connection, with what was already read put back in
// front, for an h2c server.
func (cc *Conn) handOffH2() net.Conn {
	return cc.detach([]byte("PRI * HTTP/2.0\r\n"))
}

// HandOff ends the engine's service of the connection: Serve then returns
// it with the current request head as received (Options.KeepRaw must be
// set) and everything read after it put back in front, for another server
// to serve. It returns false, for ServeRequest to return.
func (cc *Conn) HandOff() bool {
	cc.handoff = cc.detach(cc.raw)
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
func (cc *Conn) Host() []byte { return cc.host }

// Target is the request target as received.
func (cc *Conn) Target() []byte { return cc.out[cc.target[0]:cc.target[1]] }

// readLine returns the next line without its line ending, valid until the
// next read. budget is what is left of the head's size limit.
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

// badRequest is an error whose message is sent to the client.
type badRequest string

func (e badRequest) Error() string { return string(e) }

// readRequest parses a request head into rq and writes the head to send to
// the app into cc.out. On error it returns the status to answer with (0 to
// just close).
func (cc *Conn) readRequest(rq *Request) (int, error) {
	budget := cc.o.MaxHeaderBytes
	rq.cl = -1
	var line []byte
	var err error
	keepRaw := cc.o.KeepRaw
	cc.host = cc.host[:0]
	for blank := 0; ; blank++ {
		line, err = readLine(cc.br, &cc.line, &budget, errHeaderTooLarge)
		if err != nil {
			return headErrorCode(err), err
		}
		if len(line) > 0 {
			break
		}
		if blank > 4 {
			return 400, badRequest("empty request line")
		}
	}
	sp1 := bytes.IndexByte(line, ' ')
	sp2 := bytes.LastIndexByte(line, ' ')
	if sp1 <= 0 || sp2 == sp1 {
		return 400, badRequest("malformed request line")
	}
	method, target, proto := line[:sp1], line[sp1+1:sp2], line[sp2+1:]
	if len(target) == 0 || bytes.IndexByte(target, ' ') >= 0 || bytes.IndexByte(target, '\r') >= 0 || !isToken(method) {
		return 400, badRequest("malformed request line")
	}
	switch string(proto) {
	case "HTTP/1.1":
	case "HTTP/1.0":
		rq.http10 = true
		rq.closeAfter = true
	case "HTTP/2.0":
		if string(method) == "PRI" && string(target) == "*" {
			return 0, errH2Preface
		}
		return 505, badRequest("HTTP version not supported")
	default:
		if bytes.HasPrefix(proto, []byte("HTTP/")) {
			return 505, badRequest("HTTP version not supported")
		}
		return 400, badRequest("malformed request line")
	}
	switch string(method) {
	case "GET", "OPTIONS", "TRACE":
		rq.idempotent = true
	case "HEAD":
		rq.isHead = true
		rq.idempotent = true
	case "CONNECT":
		return 405, badRequest("CONNECT is not supported by " + cc.o.Name)
	}
	if keepRaw {
		cc.raw = append(cc.raw[:0], line...)
		cc.raw = append(cc.raw, '\r', '\n')
	}
	cc.target = [2]int{sp1 + 1, sp2}
	out := append(cc.out[:0], line...)
	out = append(out, '\r', '\n')
	cc.xff = cc.xff[:0]
	cc.hop = cc.hop[:0]
	for {
		line, err = readLine(cc.br, &cc.line, &budget, errHeaderTooLarge)
		if err != nil {
			cc.out = out
			return headErrorCode(err), err
		}
		if keepRaw {
			cc.raw = append(cc.raw, line...)
			cc.raw = append(cc.raw, '\r', '\n')
		}
		if len(line) == 0 {
			break
		}
		if line[0] == ' ' || line[0] == '\t' {
			return 400, badRequest("obsolete line folding in header")
		}
		if bytes.IndexByte(line, '\r') >= 0 || bytes.IndexByte(line, 0) >= 0 {
			return 400, badRequest("CR or NUL inside a header line")
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 || line[colon-1] == ' ' || line[colon-1] == '\t' {
			return 400, badRequest("malformed header line")
		}
		name, value := line[:colon], trimOWS(line[colon+1:])
		drop := false
		switch len(name) {
		case 4:
			if eqFold(name, "host") {
				if rq.host {
					return 400, badRequest("more than one Host header")
				}
				rq.host = true
				cc.host = append(cc.host, value...)
			}
		case 7:
			if eqFold(name, "upgrade") {
				rq.hasUpgrade = true
			}
		case 9:
			drop = cc.o.Forwarded && eqFold(name, "forwarded")
		case 10:
			switch {
			case eqFold(name, "connection"):
				drop = true
				cc.connectionTokens(value, rq)
			case eqFold(name, "keep-alive"):
				drop = true
			case eqFold(name, "user-agent"):
				rq.probe = bytes.HasPrefix(value, []byte("kube-probe/"))
			}
		case 14:
			if eqFold(name, "content-length") {
				n, ok := parseLength(value)
				if !ok || (rq.cl >= 0 && rq.cl != n) {
					return 400, badRequest("invalid Content-Length")
				}
				rq.cl = n
			}
		case 15:
			if eqFold(name, "x-forwarded-for") {
				drop = true
				if len(cc.xff) > 0 {
					cc.xff = append(cc.xff, ", "...)
				}
				cc.xff = append(cc.xff, value...)
			}
		case 16:
			drop = eqFold(name, "proxy-connection") || cc.o.Forwarded && eqFold(name, "x-forwarded-host")
		case 17:
			drop = cc.o.Forwarded && eqFold(name, "x-forwarded-proto")
			if eqFold(name, "transfer-encoding") {
				if rq.chunked {
					return 400, badRequest("more than one Transfer-Encoding header")
				}
				if !eqFold(value, "chunked") {
					return 501, badRequest("unsupported Transfer-Encoding")
				}
				rq.chunked = true
			}
		}
		if !drop {
			out = append(out, line...)
			out = append(out, '\r', '\n')
		}
	}
	if !rq.http10 && !rq.host {
		return 400, badRequest("missing Host header")
	}
	if rq.chunked {
		if rq.cl >= 0 {
			return 400, badRequest("both Content-Length and Transfer-Encoding")
		}
		if rq.http10 {
			return 400, badRequest("chunked HTTP/1.0 request")
		}
	}
	if rq.extraHop {
		out = dropHeaders(out, cc.hop)
	}
	out = append(out, "X-Forwarded-For: "...)
	if len(cc.xff) > 0 {
		out = append(out, cc.xff...)
		out = append(out, ", "...)
	}
	out = append(out, cc.ip...)
	out = append(out, '\r', '\n')
	if cc.o.Forwarded {
		if rq.host {
			out = append(out, "X-Forwarded-Host: "...)
			out = append(out, cc.host...)
			out = append(out, '\r', '\n')
		}
		out = append(out, "X-Forwarded-Proto: http\r\n"...)
	}
	rq.upgrade = rq.upgrade && rq.hasUpgrade
	if rq.upgrade {
		out = append(out, "Connection: Upgrade\r\n"...)
	}
	cc.out = append(out, '\r', '\n')
	return 0, nil
}

func headErrorCode(err error) int {
	if err == errHeaderTooLarge {
		return 431
	}
	return 0 // timeout, EOF, reset: just close
}

// connectionTokens reads the Connection header's tokens into rq.
func (cc *Conn) connectionTokens(v []byte, rq *Request) {
	for len(v) > 0 {
		var tok []byte
		if i := bytes.IndexByte(v, ','); i >= 0 {
			tok, v = trimOWS(v[:i]), v[i+1:]
		} else {
			tok, v = trimOWS(v), nil
		}
		switch {
		case len(tok) == 0:
		case eqFold(tok, "close"):
			rq.closeAfter = true
		case eqFold(tok, "keep-alive"):
		case eqFold(tok, "upgrade"):
			rq.upgrade = true
		default:
			rq.extraHop = true
			cc.hop = append(cc.hop, tok...)
			cc.hop = append(cc.hop, ',')
		}
	}
}

// dropHeaders removes from a head the header lines named in names (comma
// separated). Rare: only for a Connection header that names other headers.
func dropHeaders(head, names []byte) []byte {
	first := bytes.Index(head, []byte("\r\n")) + 2
	out := append([]byte(nil), head[:first]...)
	rest := head[first:]
	for len(rest) > 0 {
		i := bytes.Index(rest, []byte("\r\n"))
		line := rest[:i+2]
		rest = rest[i+2:]
		name := line[:bytes.IndexByte(line, ':')]
		keep := true
		for ns := names; len(ns) > 0; {
			j := bytes.IndexByte(ns, ',')
			if bytes.EqualFold(ns[:j], name) {
				keep = false
				break
			}
			ns = ns[j+1:]
		}
		if keep {
			out = append(out, line...)
		}
	}
	return out
}

// RoundTrip sends the request to up and copies the response back to the
// client; it reports whether the client connection may carry another
// request. A 101 response turns the connection into a byte tunnel until
// both sides are done.
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
	cc.sent1xx = false
	var uc *upConn
	var rs response
	var bodyDone chan error
	for attempt := 0; ; attempt++ {
		var reused bool
		var err error
		if attempt == 0 {
			uc, reused, err = up.get(cc.now)
		} else {
			uc, err = up.dial()
		}
		if err != nil {
			return cc.badGateway(up, rq, err)
		}
		_, err = uc.c.Write(cc.out)
		writeFailed := err != nil
		if err == nil && streamBody {
			bodyDone = cc.startRequestBody(uc.c, rq.chunked, rq.cl)
		}
		if err == nil {
			err = cc.readResponseHead(uc.br, &rs)
			if err == nil {
				break
			}
		}
		uc.close()
		// A connection the app closed while it sat in the pool fails before
		// any byte of a response: send again if the request can be resent.
		if reused && attempt == 0 && !streamBody && !cc.sent1xx && (rq.idempotent || writeFailed) && isConnClosedErr(err) {
			continue
		}
		if bodyDone != nil {
			cc.c.Close()
			<-bodyDone
			return false
		}
		if cc.sent1xx { // too late for a 502
			return false
		}
		return cc.badGateway(up, rq, err)
	}

	keep := !rq.closeAfter && !cc.h.Draining()
	if rs.code == 101 {
		if bodyDone != nil {
			if err := <-bodyDone; err != nil {
				uc.close()
				return false
			}
		}
		cc.tunnel(uc)
		return false
	}
	f := &cc.f
	switch {
	case rq.isHead || rs.code == 204 || rs.code == 304:
		f.reset(bodyNone, 0)
	case rs.chunked:
		f.reset(bodyChunked, 0)
	case rs.cl >= 0:
		f.reset(bodyLength, rs.cl)
	default:
		f.reset(bodyClose, 0)
		keep = false
		rs.upstreamClose = true
	}
	if !keep {
		cc.resp = append(cc.resp, "Connection: close\r\n"...)
	}
	cc.resp = append(cc.resp, '\r', '\n')
	err := cc.pump(cc.c, uc.br, cc.resp, f, nil)
	cc.resp = cc.resp[:0]
	if err != nil {
		uc.close()
		if bodyDone != nil {
			cc.c.Close()
			<-bodyDone
		}
		return false
	}
	if bodyDone != nil {
		t := time.NewTimer(bodyWait)
		select {
		case err = <-bodyDone:
			t.Stop()
		case <-t.C:
			err = errBodyUnfinished
			cc.c.Close()
			uc.close()
			<-bodyDone
		}
		if err != nil {
			uc.close()
			return false
		}
	}
	if rs.upstreamClose || rq.http10 {
		uc.close()
	} else {
		up.put(uc, cc.now)
	}
	return keep
}

var errBodyUnfinished = errors.New("the app answered before reading the whole request body")

func isConnClosedErr(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) || isResetErr(err)
}

// startRequestBody streams the request body from the client to the app in
// its own goroutine (the app may answer while it still reads) and reports
// the outcome on the returned channel.
func (cc *Conn) startRequestBody(dst *net.TCPConn, chunked bool, length int64) chan error {
	done := make(chan error, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- fmt.Errorf("panic copying a request body: %v", r)
			}
		}()
		var f framing
		if chunked {
			f.reset(bodyChunked, 0)
		} else {
			f.reset(bodyLength, length)
		}
		err := cc.pump(dst, cc.br, nil, &f, cc.c)
		if err != nil {
			dst.Close() // abort the exchange: the app must not wait for the rest
		}
		done <- err
	}()
	return done
}

// pump copies one body framed by f from src to dst, writing pre first; each
// piece is written as soon as it arrives (so streams are flushed as they
// come). When readConn is set, each blocking read from it gets the idle
// timeout.
func (cc *Conn) pump(dst *net.TCPConn, src *bufio.Reader, pre []byte, f *framing, readConn *net.TCPConn) error {
	timeout := cc.o.IdleTimeout
	pending := pre
	for !f.done() {
		if src.Buffered() == 0 {
			if len(pending) > 0 {
				if err := cc.write(dst, pending); err != nil {
					return err
				}
				pending = nil
			}
			if readConn != nil {
				readConn.SetReadDeadline(time.Now().Add(timeout))
			}
			if _, err := src.Peek(1); err != nil {
				if f.kind == bodyClose && err == io.EOF {
					f.kind = bodyNone
					break
				}
				return err
			}
			if dst == cc.c {
				cc.now = time.Now() // a stream: keep the write deadline moving
			}
		}
		b, _ := src.Peek(src.Buffered())
		n, err := f.consume(b)
		if err != nil {
			return err
		}
		if len(pending)+n <= mergeMax && pending != nil {
			pending = append(pending, b[:n]...)
			if len(pre) > 0 {
				cc.resp = pending // keep the grown buffer
			}
		} else {
			if len(pending) > 0 {
				if err := cc.write(dst, pending); err != nil {
					return err
				}
				pending = nil
			}
			if err := cc.write(dst, b[:n]); err != nil {
				return err
			}
		}
		src.Discard(n)
	}
	if len(pending) > 0 {
		return cc.write(dst, pending)
	}
	return nil
}

// write writes b to dst; writes to the client carry the idle timeout,
// renewed when half of it is used up so that not every write pays for it.
func (cc *Conn) write(dst *net.TCPConn, b []byte) error {
	if dst == cc.c {
		timeout := cc.o.IdleTimeout
		if cc.wdl.Sub(cc.now) < timeout/2 {
			cc.wdl = time.Now().Add(timeout)
			cc.c.SetWriteDeadline(cc.wdl)
		}
	}
	_, err := dst.Write(b)
	return err
}

// readResponseHead reads the next response head from the app into cc.resp
// (without the final empty line), forwarding and skipping 1xx heads other
// than 101.
func (cc *Conn) readResponseHead(br *bufio.Reader, rs *response) error {
	cc.resp = cc.resp[:0]
	for {
		if err := cc.readOneResponseHead(br, rs); err != nil {
			return err
		}
		if rs.code >= 200 || rs.code == 101 {
			return nil
		}
		// 100 Continue, 103 Early Hints: forward at once.
		cc.resp = append(cc.resp, '\r', '\n')
		if err := cc.write(cc.c, cc.resp); err != nil {
			return err
		}
		cc.resp = cc.resp[:0]
		cc.sent1xx = true
	}
}

func (cc *Conn) readOneResponseHead(br *bufio.Reader, rs *response) error {
	*rs = response{cl: -1}
	budget := maxResponseHead
	line, err := readLine(br, &cc.line, &budget, errBadResponse)
	if err != nil {
		return err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' {
		return errBadResponse
	}
	code, ok := parseStatus(line[9:12])
	if !ok || (len(line) > 12 && line[12] != ' ') {
		return errBadResponse
	}
	rs.code = code
	rs.upstreamClose = line[7] == '0' // HTTP/1.0: one response per connection
	resp := append(cc.resp[:0], line...)
	resp = append(resp, '\r', '\n')
	for {
		line, err = readLine(br, &cc.line, &budget, errBadResponse)
		if err != nil {
			cc.resp = resp
			return err
		}
		if len(line) == 0 {
			break
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 {
			cc.resp = resp
			return errBadResponse
		}
		name, value := line[:colon], trimOWS(line[colon+1:])
		drop := false
		switch len(name) {
		case 10:
			switch {
			case eqFold(name, "connection"):
				if bytes.Contains(value, []byte("close")) || bytes.Contains(value, []byte("Close")) {
					rs.upstreamClose = true
				}
				drop = code != 101
			case eqFold(name, "keep-alive"):
				drop = true
			}
		case 14:
			if eqFold(name, "content-length") {
				n, ok := parseLength(value)
				if !ok || (rs.cl >= 0 && rs.cl != n) {
					cc.resp = resp
					return errBadResponse
				}
				rs.cl = n
			}
		case 16:
			drop = eqFold(name, "proxy-connection")
		case 17:
			if eqFold(name, "transfer-encoding") {
				// Passed through as is; only a final "chunked" frames the body.
				rs.chunked = hasSuffixFold(value, "chunked")
			}
		}
		if !drop {
			resp = append(resp, line...)
			resp = append(resp, '\r', '\n')
		}
	}
	if rs.chunked {
		rs.cl = -1
	}
	cc.resp = resp
	return nil
}

// tunnel connects client and app byte for byte after a 101 until both sides
// are done; it counts as in flight all along.
func (cc *Conn) tunnel(uc *upConn) {
	defer uc.close()
	cc.c.SetReadDeadline(time.Time{})
	cc.c.SetWriteDeadline(time.Time{})
	cc.resp = append(cc.resp, '\r', '\n')
	if _, err := cc.c.Write(cc.resp); err != nil {
		return
	}
	cc.resp = cc.resp[:0]
	done := make(chan struct{})
	go func() {
		defer close(done)
		splice(uc.c, cc.br, cc.c)
	}()
	splice(cc.c, uc.br, uc.c)
	<-done
}

// splice copies what br holds and then everything from src to dst, and
// half-closes dst when src ends.
func splice(dst *net.TCPConn, br *bufio.Reader, src *net.TCPConn) {
	defer dst.CloseWrite()
	if n := br.Buffered(); n > 0 {
		b, _ := br.Peek(n)
		if _, err := dst.Write(b); err != nil {
			src.CloseRead()
			return
		}
		br.Discard(n)
	}
	if _, err := io.Copy(dst, src); err != nil {
		src.CloseRead()
	}
}

// badGateway answers 502 because the upstream could not be reached or
// answered garbage.
func (cc *Conn) badGateway(up *Upstream, rq *Request, err error) bool {
	keep := !rq.hasBody() && !rq.closeAfter && !cc.h.Draining()
	msg := cc.h.BadGateway(up, err) + "\n"
	cc.writeResponse(502, msg, keep)
	if !keep {
		cc.closeGently()
	}
	return keep
}

// writeError answers a request the sidecar refuses and closes the
// connection gently: it half-closes and reads what the client still sends
// for a while, so that the kernel does not reset the connection (and lose
// the answer) because of unread bytes.
func (cc *Conn) writeError(code int, msg string) {
	cc.writeResponse(code, cc.o.Name+": "+msg+"\n", false)
	cc.closeGently()
}

func (cc *Conn) closeGently() {
	cc.c.CloseWrite()
	cc.c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	io.Copy(io.Discard, io.LimitReader(cc.c, 256<<10))
}

func (cc *Conn) writeResponse(code int, body string, keep bool) {
	b := cc.resp[:0]
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(code), 10)
	b = append(b, ' ')
	b = append(b, statusText(code)...)
	b = append(b, "\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(len(body)), 10)
	if !keep {
		b = append(b, "\r\nConnection: close"...)
	}
	b = append(b, "\r\n\r\n"...)
	b = append(b, body...)
	cc.c.SetWriteDeadline(time.Now().Add(cc.o.HeaderTimeout))
	cc.wdl = time.Time{}
	cc.c.Write(b)
	cc.resp = b[:0]
}

func statusText(code int) string {
	switch code {
	case 400:
		return "Bad Request"
	case 405:
		return "Method Not Allowed"
	case 431:
		return "Request Header Fields Too Large"
	case 501:
		return "Not Implemented"
	case 502:
		return "Bad Gateway"
	case 505:
		return "HTTP Version Not Supported"
	}
	return "Error"
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

func isResetErr(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}
