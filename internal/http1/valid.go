package http1

// ValidHost reports whether h may be a request's Host, or an HTTP/2
// request's :authority: not empty, and only the bytes the engine takes in
// a Host header. The sidecar's h2c path refuses others as the engine does
// (net/http's HTTP/2 server checks none, and its transport would refuse
// some with a 502, punycode others, and send the app's address for an
// empty one).
func ValidHost(h string) bool {
	if h == "" {
		return false
	}
	for i := 0; i < len(h); i++ {
		if !hostChars[h[i]] {
			return false
		}
	}
	return true
}

// ValidTarget reports whether t may be a request target: the engine's
// check (no controls, SP or DEL; valid percent-escapes in the path; "*";
// an absolute URI), for the h2c path's :path.
func ValidTarget(t string) bool { return validTarget([]byte(t)) }

// ValidMethod reports whether m may be a request method: a token, as the
// engine has it (net/http's HTTP/2 server takes an empty :method).
func ValidMethod(m string) bool { return m != "" && isToken([]byte(m)) }

// ValidFieldName reports whether n may be a header field's name: a token.
func ValidFieldName(n string) bool { return isToken([]byte(n)) }

// ValidFieldValue reports whether v may be a header field's value as the
// engine sends one: field-vchar, SP and HTAB only (no CR, LF, NUL or other
// control), no whitespace at either end.
func ValidFieldValue(v string) bool {
	b := []byte(v)
	return all(b, &valueChars) && len(trimOWS(b)) == len(b)
}
