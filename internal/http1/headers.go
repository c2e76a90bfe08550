package http1

import "bytes"

// DelHeader removes every header line called name (lower case) from the
// request's head for the app, and reports whether there was one. Call it
// from ServeRequest, before RoundTrip; it scans the head, as Header does.
func (cc *Conn) DelHeader(name string) bool {
	if _, _, n := cc.findHeader(name); n == 0 {
		return false
	}
	b := cc.out
	i := bytes.Index(b, crlf) + 2 // past the request line
	w := i
	for i < len(b) {
		end := bytes.Index(b[i:], crlf)
		if end <= 0 {
			break // the empty line: the head's end
		}
		line := b[i : i+end+2]
		if !(len(line) > len(name)+2 && line[len(name)] == ':' && eqFold(line[:len(name)], name)) {
			w += copy(b[w:], line)
		}
		i += end + 2
	}
	w += copy(b[w:], b[i:])
	cc.out = b[:w]
	return true
}

// AddHeader adds the header line name: value to the request's head for
// the app; false, changing nothing, when name is not a token or value not
// a field value the engine would send (ValidFieldName, ValidFieldValue),
// or when name is a framing header (the engine's own). Call it from
// ServeRequest, before RoundTrip.
func (cc *Conn) AddHeader(name, value string) bool {
	if !ValidFieldName(name) || !ValidFieldValue(value) || len(cc.out) < 4 {
		return false
	}
	if eqFold([]byte(name), "content-length") || eqFold([]byte(name), "transfer-encoding") || eqFold([]byte(name), "host") || eqFold([]byte(name), "connection") {
		return false
	}
	head := cc.out[:len(cc.out)-2] // without the empty line
	head = append(head, name...)
	head = append(head, ": "...)
	head = append(head, value...)
	cc.out = append(head, '\r', '\n', '\r', '\n')
	return true
}
