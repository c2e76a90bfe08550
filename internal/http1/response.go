package http1

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"time"
)

// maxResponseHead bounds the response head read from the app.
const maxResponseHead = 1 << 20

var errBadResponse = errors.New("malformed response from the app")

// response is what the proxy needs to know about one response head.
type response struct {
	code    int
	cl      int64 // Content-Length; -1 without one
	chunked bool
	// close: the app closes the connection after this response (HTTP/1.0,
	// or a close option).
	close bool
}

// errTooMany1xx: the app sent more than max1xx informational responses.
var errTooMany1xx = errors.New("too many 1xx responses from the app")

// readResponseHead reads the next final response head from the app into
// cc.resp (without the final empty line), forwarding 1xx heads other than
// 101 to HTTP/1.1 clients and skipping them for HTTP/1.0 ones (RFC 9110
// section 15.2): at most max1xx of them, all within the one
// response-header timeout.
func (cc *Conn) readResponseHead(uc *upConn, rq *Request, rs *response) error {
	var deadline time.Time // the response-header timeout's, once it runs
	for n1xx := 0; ; {
		if err := cc.awaitResponse(uc, &deadline); err != nil {
			return err
		}
		if err := cc.readOneResponseHead(uc.br, rq, rs); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return &ResponseTimeoutError{After: cc.responseHeaderTimeout()}
			}
			return err
		}
		if rs.code >= 200 || rs.code == 101 {
			return nil
		}
		if n1xx++; n1xx > max1xx {
			return errTooMany1xx
		}
		if rq.http10 {
			continue
		}
		// 100 Continue, 103 Early Hints: forward at once.
		cc.resp = append(cc.resp, '\r', '\n')
		if err := cc.write(cc.c, cc.resp); err != nil {
			return errClientGone // not the app's failure: nothing to resend
		}
		cc.req.sent1xx = true
		cc.req.now = time.Now() // for the write deadline (the response-header timeout runs on)
	}
}

// readOneResponseHead parses one response head into rs and builds the head
// for the client in cc.resp: the status line and the header lines that
// passed every check, less the hop-by-hop ones (Connection, Keep-Alive,
// Proxy-Connection and every header the Connection header names; a 101
// keeps Connection and Upgrade), then the framing the engine applies, from
// the parsed values. The final empty line (and Connection: close) is the
// caller's. A head that breaks RFC 9112's framing rules (Content-Length and
// Transfer-Encoding both, a coding other than chunked, Transfer-Encoding
// in HTTP/1.0, obsolete line folding, a malformed line) is an error: the
// client gets a 502 and the connection to the app is closed.
func (cc *Conn) readOneResponseHead(br *bufio.Reader, rq *Request, rs *response) error {
	*rs = response{cl: -1}
	budget := maxResponseHead
	line, err := readLine(br, &cc.line, &budget, errBadResponse)
	if err != nil {
		return err
	}
	// status-line = HTTP-version SP status-code SP [ reason-phrase ]
	if len(line) < 12 || string(line[:7]) != "HTTP/1." || (line[7] != '0' && line[7] != '1') || line[8] != ' ' {
		return errBadResponse
	}
	code, ok := parseStatus(line[9:12])
	if !ok || (len(line) > 12 && (line[12] != ' ' || !all(line[13:], &reasonChars))) {
		return errBadResponse
	}
	if code == 101 && (!rq.upgrade || rq.http10) {
		return errBadResponse // switching protocols nobody asked for
	}
	rs.code = code
	http10 := line[7] == '0'
	rs.close = http10
	resp := append(cc.resp[:0], line...)
	resp = append(resp, '\r', '\n')
	cc.req.hop = cc.req.hop[:0]
	extraHop := false
	nte, clDigits := 0, 0
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
		if colon <= 0 || !isToken(line[:colon]) {
			cc.resp = resp
			return errBadResponse // obs-fold included: it starts with SP or HTAB
		}
		name, value := line[:colon], trimOWS(line[colon+1:])
		if !all(value, &valueChars) {
			cc.resp = resp
			return errBadResponse
		}
		drop := false
		switch len(name) {
		case 10:
			switch {
			case eqFold(name, "connection"):
				closeOpt, _, extra := cc.connectionOptions(value)
				rs.close = rs.close || closeOpt
				extraHop = extraHop || extra
				drop = code != 101
			case eqFold(name, "keep-alive"):
				drop = true
			}
		case 14:
			if eqFold(name, "content-length") {
				drop = true
				n, ok := parseLength(value)
				if !ok || (rs.cl >= 0 && (rs.cl != n || len(value) != clDigits)) {
					cc.resp = resp
					return errBadResponse
				}
				rs.cl, clDigits = n, len(value)
			}
		case 16:
			drop = eqFold(name, "proxy-connection")
		case 17:
			if eqFold(name, "transfer-encoding") {
				drop = true
				nte++
				// HTTP/1.0 has no chunked framing, either way.
				if nte > 1 || http10 || rq.http10 || !eqFold(value, "chunked") {
					cc.resp = resp
					return errBadResponse
				}
				rs.chunked = true
			}
		}
		if !drop {
			resp = append(resp, line...)
			resp = append(resp, '\r', '\n')
		}
	}
	if rs.chunked && rs.cl >= 0 {
		cc.resp = resp
		return errBadResponse
	}
	if extraHop && code != 101 {
		resp = dropHeaders(resp, cc.req.hop)
	}
	if code >= 200 && code != 204 { // 1xx and 204: no body, nothing to say about one
		resp = appendFraming(resp, rs.chunked, rs.cl)
	}
	if cap(cc.line) > 64<<10 {
		cc.line = nil // an odd, huge head: do not keep its buffer per connection
	}
	cc.resp = resp
	return nil
}
