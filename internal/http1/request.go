package http1

import (
	"bytes"
	"errors"
	"net/url"
	"strconv"
)

// Request is what the engine knows about one request head; it is valid
// while the Handler serves it.
type Request struct {
	http10     bool
	isHead     bool
	chunked    bool
	closeAfter bool // the client asked to close, or spoke HTTP/1.0
	upgrade    bool // Connection: upgrade and an Upgrade header
	hasUpgrade bool
	idempotent bool // GET, HEAD, OPTIONS or TRACE
	host       bool
	extraHop   bool  // Connection names other headers to drop
	cl         int64 // Content-Length; -1 without one
}

func (rq *Request) hasBody() bool { return rq.chunked || rq.cl > 0 }

var errHeaderTooLarge = errors.New("request head too large")

// badRequest is an error whose message is sent to the client.
type badRequest string

func (e badRequest) Error() string { return string(e) }

// readRequest parses a request head into cc.req and writes the head to send
// to the app into cc.out. On error it returns the status to answer with (0
// to just close).
//
// The head for the app is built, not copied: the request line from the
// parsed method, target and version; the header lines that passed every
// check, less the hop-by-hop ones (Connection, Keep-Alive,
// Proxy-Connection, an Upgrade not asked for, and every header the
// Connection header names, except Host); then the framing the engine
// applies to the body (Content-Length or Transfer-Encoding: chunked, from
// the parsed values), X-Forwarded-For (the client's values, then its
// address; the other forwarding headers pass as received: forwarded.go)
// and, for an upgrade, Connection: Upgrade. Whatever the client's
// Connection header names, the app frames the body exactly as the engine
// does.
//
// Its parts, in order: readRequestLine, parseRequestLine, readHeaderFields
// (splitFieldLine and headerField for each line), decideFraming and
// appendGeneratedFields. Each part's first failure ends the head.
func (cc *Conn) readRequest() (int, error) {
	budget := cc.o.MaxHeaderBytes // what is left of the head's size limit
	cc.req.rq.cl = -1
	line, code, err := cc.readRequestLine(&budget)
	if err != nil {
		return code, err
	}
	out, code, err := cc.parseRequestLine(line)
	if err != nil {
		return code, err
	}
	out, code, err = cc.readHeaderFields(out, &budget)
	if err != nil {
		return code, err
	}
	if code, err := cc.decideFraming(); err != nil {
		return code, err
	}
	cc.out = cc.appendGeneratedFields(out)
	return 0, nil
}

// readRequestLine reads the request line, after at most maxBlankLines
// empty lines, and starts the raw head with it (Options.KeepRaw).
func (cc *Conn) readRequestLine(budget *int) ([]byte, int, error) {
	var line []byte
	var err error
	for blank := 0; ; blank++ {
		line, err = readLine(cc.br, &cc.line, budget, errHeaderTooLarge)
		if err != nil {
			return nil, headErrorCode(err), err
		}
		if len(line) > 0 {
			break
		}
		if blank >= maxBlankLines {
			return nil, 400, badRequest("empty request line")
		}
	}
	if cc.o.KeepRaw {
		cc.req.raw = append(cc.req.raw[:0], line...)
		cc.req.raw = append(cc.req.raw, '\r', '\n')
	}
	return line, 0, nil
}

// parseRequestLine parses request-line = method SP request-target SP
// HTTP-version into cc.req (the version, and what the method implies) and
// returns the request line for the app, written over cc.out's buffer, with
// the target's place in it noted in cc.req.target. A PRI * HTTP/2.0 line is errH2Preface;
// CONNECT is refused (405).
func (cc *Conn) parseRequestLine(line []byte) (out []byte, code int, err error) {
	rq := &cc.req.rq
	sp1 := bytes.IndexByte(line, ' ')
	if sp1 <= 0 {
		return nil, 400, badRequest("malformed request line")
	}
	sp2 := bytes.IndexByte(line[sp1+1:], ' ')
	if sp2 <= 0 {
		return nil, 400, badRequest("malformed request line")
	}
	sp2 += sp1 + 1
	method, target, proto := line[:sp1], line[sp1+1:sp2], line[sp2+1:]
	if !isToken(method) {
		return nil, 400, badRequest("malformed request line")
	}
	major, minor, ok := parseVersion(proto)
	if !ok {
		return nil, 400, badRequest("malformed request line")
	}
	if major != 1 {
		if major == 2 && minor == 0 && string(method) == "PRI" && string(target) == "*" {
			return nil, 0, errH2Preface
		}
		return nil, 505, badRequest("HTTP version not supported")
	}
	if minor == 0 {
		rq.http10 = true
		rq.closeAfter = true
	}
	switch string(method) {
	case "GET", "OPTIONS", "TRACE":
		rq.idempotent = true
	case "HEAD":
		rq.isHead = true
		rq.idempotent = true
	case "CONNECT":
		return nil, 405, badRequest("CONNECT is not supported by " + cc.o.Name)
	}
	if !validTarget(target) {
		return nil, 400, badRequest("malformed request target")
	}
	out = append(cc.out[:0], method...)
	out = append(out, ' ')
	cc.req.target[0] = len(out)
	out = append(out, target...)
	cc.req.target[1] = len(out)
	if rq.http10 {
		out = append(out, " HTTP/1.0\r\n"...)
	} else {
		out = append(out, " HTTP/1.1\r\n"...)
	}
	return out, 0, nil
}

// readHeaderFields reads the header lines up to the empty line that ends
// the head, adds each to the raw head (Options.KeepRaw), checks it
// (splitFieldLine), takes what the engine needs from it (headerField) and
// appends it to out unless it is hop-by-hop or framing, which the engine
// writes itself.
func (cc *Conn) readHeaderFields(out []byte, budget *int) ([]byte, int, error) {
	var seen fieldsSeen
	for {
		line, err := readLine(cc.br, &cc.line, budget, errHeaderTooLarge)
		if err != nil {
			cc.out = out
			return out, headErrorCode(err), err
		}
		if cc.o.KeepRaw {
			cc.req.raw = append(cc.req.raw, line...)
			cc.req.raw = append(cc.req.raw, '\r', '\n')
		}
		if len(line) == 0 {
			return out, 0, nil
		}
		name, value, err := splitFieldLine(line)
		if err != nil {
			return out, 400, err
		}
		drop, code, err := cc.headerField(name, value, &seen)
		if err != nil {
			return out, code, err
		}
		if !drop {
			out = append(out, line...)
			out = append(out, '\r', '\n')
		}
	}
}

// splitFieldLine splits field-line = field-name ":" OWS field-value OWS
// and refuses (400) obsolete line folding, a name that is not a token, a
// control character in the value, and Content-Length or Transfer-Encoding
// spelt with _ for - (servers that read _ as -, CGI and WSGI, would frame
// by it).
func splitFieldLine(line []byte) (name, value []byte, err error) {
	if line[0] == ' ' || line[0] == '\t' {
		return nil, nil, badRequest("obsolete line folding in header")
	}
	colon := bytes.IndexByte(line, ':')
	if colon <= 0 || !isToken(line[:colon]) {
		return nil, nil, badRequest("malformed header line")
	}
	name, value = line[:colon], trimOWS(line[colon+1:])
	if !all(value, &valueChars) {
		return nil, nil, badRequest("control character in a header value")
	}
	if (len(name) == 14 || len(name) == 17) && bytes.IndexByte(name, '_') >= 0 &&
		(eqFoldDash(name, "content-length") || eqFoldDash(name, "transfer-encoding")) {
		return nil, nil, badRequest("a framing header spelt with _")
	}
	return name, value, nil
}

// fieldsSeen is what a head's earlier header fields said that a later one
// must agree with.
type fieldsSeen struct {
	te       int // Transfer-Encoding fields
	clDigits int // length of the Content-Length value (a repeat must be the same)
}

// headerField takes what the engine needs from one checked header field
// into cc.req: Host (exactly one, of host characters), Upgrade,
// Connection's options, Content-Length (repeated only as is, net/http's
// rule), X-Forwarded-For (joined), Transfer-Encoding (once, chunked only:
// 501 for any other coding). drop reports a field the head for the app
// does not carry as received (hop-by-hop, framing, X-Forwarded-For).
func (cc *Conn) headerField(name, value []byte, seen *fieldsSeen) (drop bool, code int, err error) {
	rq := &cc.req.rq
	switch len(name) {
	case 4:
		if eqFold(name, "host") {
			if rq.host {
				return false, 400, badRequest("more than one Host header")
			}
			if !all(value, &hostChars) {
				return false, 400, badRequest("malformed Host header")
			}
			rq.host = true
			cc.req.host = append(cc.req.host, value...)
		}
	case 7:
		if eqFold(name, "upgrade") {
			rq.hasUpgrade = true
		}
	case 10:
		switch {
		case eqFold(name, "connection"):
			drop = true
			closeOpt, upgradeOpt, extra := cc.connectionOptions(value)
			rq.closeAfter = rq.closeAfter || closeOpt
			rq.upgrade = rq.upgrade || upgradeOpt
			rq.extraHop = rq.extraHop || extra
		case eqFold(name, "keep-alive"):
			drop = true
		}
	case 14:
		if eqFold(name, "content-length") {
			drop = true
			n, ok := parseLength(value)
			if !ok || (rq.cl >= 0 && (rq.cl != n || len(value) != seen.clDigits)) {
				return false, 400, badRequest("invalid Content-Length")
			}
			rq.cl, seen.clDigits = n, len(value)
		}
	case 15:
		if eqFold(name, "x-forwarded-for") {
			drop = true
			if len(cc.req.xff) > 0 {
				cc.req.xff = append(cc.req.xff, ", "...)
			}
			cc.req.xff = append(cc.req.xff, value...)
		}
	case 16:
		drop = eqFold(name, "proxy-connection")
	case 17:
		switch {
		case eqFold(name, "transfer-encoding"):
			drop = true
			seen.te++
			if seen.te > 1 {
				return false, 400, badRequest("more than one Transfer-Encoding header")
			}
			if !eqFold(value, "chunked") {
				return false, 501, badRequest("unsupported Transfer-Encoding (only chunked is)")
			}
			rq.chunked = true
		}
	}
	return drop, 0, nil
}

// decideFraming settles, from the whole head, how the request is framed and
// what its connection does: a Host header is required of HTTP/1.1;
// chunked with a Content-Length too, or in HTTP/1.0, is refused (400:
// RFC 9112 section 6.1, both may be an attempt to smuggle, and HTTP/1.0
// has no chunked framing; refused rather than guessed); an upgrade needs
// both Connection: upgrade and an Upgrade header, and an Upgrade header
// not asked for is dropped as hop-by-hop.
func (cc *Conn) decideFraming() (int, error) {
	rq := &cc.req.rq
	if !rq.http10 && !rq.host {
		return 400, badRequest("missing Host header")
	}
	if rq.chunked {
		if rq.cl >= 0 {
			return 400, badRequest("both Content-Length and Transfer-Encoding")
		}
		if rq.http10 {
			return 400, badRequest("Transfer-Encoding in an HTTP/1.0 request")
		}
	}
	rq.upgrade = rq.upgrade && rq.hasUpgrade
	if rq.hasUpgrade && !rq.upgrade {
		rq.extraHop = true
		cc.req.hop = append(cc.req.hop, "upgrade,"...)
	}
	return 0, nil
}

// appendGeneratedFields ends the head for the app in out: it drops the
// header lines the Connection header named (and an Upgrade not asked
// for), then appends the fields the engine writes itself — the body's
// framing, X-Forwarded-For (the client's values, then its address),
// Connection: Upgrade for an upgrade — and the empty line.
func (cc *Conn) appendGeneratedFields(out []byte) []byte {
	rq := &cc.req.rq
	if rq.extraHop {
		out = dropHeaders(out, cc.req.hop)
	}
	out = appendFraming(out, rq.chunked, rq.cl)
	out = append(out, "X-Forwarded-For: "...)
	if len(cc.req.xff) > 0 {
		out = append(out, cc.req.xff...)
		out = append(out, ", "...)
	}
	out = append(out, cc.ip...)
	out = append(out, '\r', '\n')
	if rq.upgrade {
		out = append(out, "Connection: Upgrade\r\n"...)
	}
	return append(out, '\r', '\n')
}

func headErrorCode(err error) int {
	if err == errHeaderTooLarge {
		return 431
	}
	return 0 // timeout, EOF, reset: just close
}

// parseVersion parses "HTTP/x.y" (one digit each, as RFC 9112 section 2.3
// and net/http have it).
func parseVersion(b []byte) (major, minor int, ok bool) {
	if len(b) != 8 || string(b[:5]) != "HTTP/" || b[6] != '.' ||
		b[5] < '0' || b[5] > '9' || b[7] < '0' || b[7] > '9' {
		return 0, 0, false
	}
	return int(b[5] - '0'), int(b[7] - '0'), true
}

// validTarget checks a request target: "*", an origin-form path (no
// controls, SP or DEL; every % followed by two hex digits before the query,
// as net/http unescapes it) or an absolute-form URI as net/url parses it.
func validTarget(t []byte) bool {
	if len(t) == 0 || !all(t, &targetChars) {
		return false
	}
	if t[0] != '/' {
		if len(t) == 1 && t[0] == '*' {
			return true
		}
		u, err := url.ParseRequestURI(string(t))
		return err == nil && u.Scheme != ""
	}
	for i := 0; i < len(t); i++ {
		switch t[i] {
		case '?':
			return true
		case '%':
			if i+2 >= len(t) {
				return false
			}
			if _, ok := unhex(t[i+1]); !ok {
				return false
			}
			if _, ok := unhex(t[i+2]); !ok {
				return false
			}
			i += 2
		}
	}
	return true
}

// connectionOptions reads a Connection header's options: close, upgrade,
// and whether it names other headers, whose names it adds to cc.req.hop (to be
// dropped).
func (cc *Conn) connectionOptions(v []byte) (closeOpt, upgradeOpt, extra bool) {
	tokens(v, func(tok []byte) {
		switch {
		case eqFold(tok, "close"):
			closeOpt = true
		case eqFold(tok, "keep-alive"):
		case eqFold(tok, "upgrade"):
			upgradeOpt = true
		default:
			extra = true
			cc.req.hop = append(cc.req.hop, tok...)
			cc.req.hop = append(cc.req.hop, ',')
		}
	})
	return closeOpt, upgradeOpt, extra
}

// appendFraming appends the framing header of a body: chunked, or a
// Content-Length when cl is not negative.
func appendFraming(b []byte, chunked bool, cl int64) []byte {
	switch {
	case chunked:
		b = append(b, "Transfer-Encoding: chunked\r\n"...)
	case cl >= 0:
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, cl, 10)
		b = append(b, '\r', '\n')
	}
	return b
}

// dropHeaders removes from a head the header lines named in names (comma
// separated), never Host. Rare: only for a Connection header that names
// other headers.
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
		if !eqFold(name, "host") {
			for ns := names; len(ns) > 0; {
				j := bytes.IndexByte(ns, ',')
				if bytes.EqualFold(ns[:j], name) {
					keep = false
					break
				}
				ns = ns[j+1:]
			}
		}
		if keep {
			out = append(out, line...)
		}
	}
	return out
}
