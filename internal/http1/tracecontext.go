package http1

import "bytes"

// TraceParent returns the value of the traceparent header the request
// carries to the app (W3C Trace Context), and how many such headers it
// has: a value is only usable when n is 1. value is the head's own bytes,
// valid until SetTraceParent or RoundTrip. Call it from ServeRequest,
// before RoundTrip; it scans the head, so only a component that traces
// should.
func (cc *Conn) TraceParent() (value []byte, n int) {
	_, value, n = cc.findHeader("traceparent")
	return value, n
}

// SetTraceParent makes the request carry traceparent v to the app: it
// overwrites the value of its one traceparent header when that has v's
// length (the framing and every other byte of the head stay as parsed),
// or adds the header when it has none. It reports false, changing
// nothing, otherwise. Call it from ServeRequest, before RoundTrip.
func (cc *Conn) SetTraceParent(v []byte) bool {
	at, old, n := cc.findHeader("traceparent")
	switch {
	case n == 1 && len(old) == len(v):
		copy(cc.out[at:], v)
		return true
	case n == 0 && len(cc.out) >= 2:
		head := cc.out[:len(cc.out)-2] // without the empty line
		head = append(head, "traceparent: "...)
		head = append(head, v...)
		cc.out = append(head, '\r', '\n', '\r', '\n')
		return true
	}
	return false
}

// findHeader finds the header lines called name (lower case) in the head
// for the app, cc.out: the offset and value of the last one, and their
// number.
func (cc *Conn) findHeader(name string) (at int, value []byte, n int) {
	b := cc.out
	i := bytes.Index(b, crlf) + 2 // past the request line
	for i > 1 && i < len(b) {
		end := bytes.Index(b[i:], crlf)
		if end <= 0 {
			break // the empty line: the head's end
		}
		line := b[i : i+end]
		if len(line) > len(name) && line[len(name)] == ':' && eqFold(line[:len(name)], name) {
			v := trimOWS(line[len(name)+1:])
			at, value = i+(len(line)-len(v))-trailingOWS(line), v
			n++
		}
		i += end + 2
	}
	return at, value, n
}

func trailingOWS(line []byte) int {
	n := 0
	for i := len(line) - 1; i >= 0 && (line[i] == ' ' || line[i] == '\t'); i-- {
		n++
	}
	return n
}

var crlf = []byte("\r\n")
