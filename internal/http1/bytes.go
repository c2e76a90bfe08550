package http1

// Byte classes of RFC 9110 and RFC 9112, as lookup tables.
var (
	// tokenChars: tchar, the bytes of a token (method, field name,
	// Transfer-Encoding coding, Connection option).
	tokenChars = byteSet("!#$%&'*+-.^_`|~", true)
	// valueChars: field-vchar, SP and HTAB, the bytes of a field value
	// (obs-text included; CR, LF, NUL and other controls not).
	valueChars = func() (t [256]bool) {
		for c := 0x20; c < 0x7f; c++ {
			t[c] = true
		}
		for c := 0x80; c < 0x100; c++ {
			t[c] = true
		}
		t['\t'] = true
		return t
	}()
	// targetChars: the bytes of a request target; controls, SP and DEL are
	// refused, the rest is left to the app (as net/http and nginx do).
	targetChars = func() (t [256]bool) {
		for c := 0x21; c < 0x100; c++ {
			t[c] = c != 0x7f
		}
		return t
	}()
	// hostChars: the bytes of a Host value (uri-host [":" port], IPv6
	// literals and zones included), the set net/http's server accepts.
	hostChars = byteSet("!$%&'()*+,-.:;=[]_~", true)
	// reasonChars: the bytes of a reason phrase (HTAB, SP, VCHAR, obs-text).
	reasonChars = valueChars
)

// byteSet returns the table of the given punctuation bytes, with letters
// and digits when alnum is set.
func byteSet(punct string, alnum bool) (t [256]bool) {
	if alnum {
		for c := '0'; c <= '9'; c++ {
			t[c] = true
		}
		for c := 'a'; c <= 'z'; c++ {
			t[c] = true
			t[c-'a'+'A'] = true
		}
	}
	for i := 0; i < len(punct); i++ {
		t[punct[i]] = true
	}
	return t
}

// all reports whether every byte of b is in set.
func all(b []byte, set *[256]bool) bool {
	for _, c := range b {
		if !set[c] {
			return false
		}
	}
	return true
}

// isToken reports whether b is a non-empty RFC 9110 token.
func isToken(b []byte) bool { return len(b) > 0 && all(b, &tokenChars) }

// trimOWS removes optional white space (SP, HTAB) around a header value.
func trimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

// eqFold reports whether b equals lower, an ASCII lower-case string, ignoring
// ASCII case.
func eqFold(b []byte, lower string) bool {
	if len(b) != len(lower) {
		return false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

// eqFoldDash is eqFold reading '_' in b as '-'.
func eqFoldDash(b []byte, lower string) bool {
	if len(b) != len(lower) {
		return false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		case c == '_':
			c = '-'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

// tokens calls fn for each non-empty element of a comma-separated list
// (Connection, Transfer-Encoding), trimmed of white space.
func tokens(v []byte, fn func(tok []byte)) {
	for len(v) > 0 {
		var tok []byte
		i := 0
		for i < len(v) && v[i] != ',' {
			i++
		}
		tok = trimOWS(v[:i])
		if i < len(v) {
			i++
		}
		v = v[i:]
		if len(tok) > 0 {
			fn(tok)
		}
	}
}

// parseLength parses a Content-Length value: decimal digits only, at most
// 18 of them.
func parseLength(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// parseStatus parses a three-digit status code of 100 or more.
func parseStatus(b []byte) (int, bool) {
	if len(b) != 3 {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, n >= 100
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
