package staticanswer

import (
	"net/http"
	"strconv"
	"unsafe"
)

// Match returns the first rule of s that matches the request with this
// method and target (its query is not matched), or nil. header returns the
// value of a header field named name (lower case) and whether the request
// has exactly one such field: a field sent twice matches no rule. A target
// not in canonical form matches no rule (see the package doc).
func (s *Set) Match(method, target string, header func(name string) (string, bool)) *Rule {
	if s == nil {
		return nil
	}
	return s.match(method, target, header)
}

// MatchBytes is Match for a request whose method, target and header
// values are bytes: they are read in place, not copied (nor kept).
func (s *Set) MatchBytes(method, target []byte, header func(name string) ([]byte, bool)) *Rule {
	if s == nil {
		return nil
	}
	return s.match(view(method), view(target), func(name string) (string, bool) {
		v, ok := header(name)
		return view(v), ok
	})
}

// view is b as a string, without a copy: for a comparison that does not
// keep it, while b does not change.
func view(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

func (s *Set) match(method, target string, header func(string) (string, bool)) *Rule {
	path := target
	for i := 0; i < len(target); i++ {
		if target[i] == '?' {
			path = target[:i]
			break
		}
	}
	if !canonical(path) {
		return nil
	}
	for i := range s.rules {
		r := &s.rules[i]
		if r.Method != "" && method != r.Method {
			continue
		}
		if !r.c.any {
			if len(path) < len(r.Path) || path[:len(r.Path)] != r.Path {
				continue
			}
			if len(path) > len(r.Path) && (!r.c.prefix || (r.Path != "/" && path[len(r.Path)] != '/')) {
				continue
			}
		}
		if headersMatch(r, header) {
			return r
		}
	}
	return nil
}

func headersMatch(r *Rule, header func(string) (string, bool)) bool {
	for i, h := range r.Headers {
		if header == nil {
			return false
		}
		v, ok := header(r.c.lower[i])
		if !ok || v != h.Value {
			return false
		}
	}
	return true
}

// canonical reports whether p is an absolute path in canonical form: it
// starts with '/', has no percent-encoding, backslash, '#', ';', empty
// segment ("//"), "." or ".." segment, and only visible ASCII. A ';' is
// refused because Tomcat, Jetty and Spring strip a segment's ";params"
// before they resolve dot segments: to them "/healthz/..;/admin" is /admin.
func canonical(p string) bool {
	if len(p) == 0 || p[0] != '/' {
		return false
	}
	seg := 1 // start of the current segment
	for i := 1; i <= len(p); i++ {
		if i < len(p) {
			c := p[i]
			if c <= ' ' || c >= 0x7f || c == '%' || c == '\\' || c == '#' || c == ';' {
				return false
			}
			if c != '/' {
				continue
			}
		}
		// p[seg:i] is a segment; the last one may be empty ("/a/").
		switch i - seg {
		case 0:
			if i < len(p) {
				return false
			}
		case 1:
			if p[seg] == '.' {
				return false
			}
		case 2:
			if p[seg] == '.' && p[seg+1] == '.' {
				return false
			}
		}
		seg = i + 1
	}
	return true
}

// Exempts reports whether a request the rule matches but does not answer
// (an AtZero rule while the app is warm) is left out of the counts: only
// for an AtZero rule without header conditions, since a client chooses
// its headers.
func (r *Rule) Exempts() bool {
	return r.When == AtZero && len(r.Headers) == 0
}

// Index is the rule's place in its Set, from 0.
func (r *Rule) Index() int { return r.c.index }

// AppendResponse appends the rule's answer as HTTP/1.1 bytes: the status
// line, the rule's headers, Content-Length (none for 204 and 304),
// "Connection: close" unless keepAlive, the blank line, and the body
// unless head (a HEAD request) or the status has none. The caller decides
// keepAlive as for any answer of its own. The rule must come from a Set.
func (r *Rule) AppendResponse(b []byte, head, keepAlive bool) []byte {
	b = append(b, r.c.head...)
	if !keepAlive {
		b = append(b, "Connection: close\r\n"...)
	}
	b = append(b, '\r', '\n')
	if !head && !r.c.noBody {
		b = append(b, r.c.body...)
	}
	return b
}

// WriteHTTP writes the rule's answer to w (an HTTP/2 stream, or any
// net/http response), for a request with method. The rule must come from
// a Set.
func (r *Rule) WriteHTTP(w http.ResponseWriter, method string) {
	h := w.Header()
	for _, f := range r.ResponseHeaders {
		h.Add(f.Name, f.Value)
	}
	if !r.c.noBody {
		if r.Body != "" && h.Get("Content-Type") == "" {
			h.Set("Content-Type", "text/plain; charset=utf-8")
		}
		h.Set("Content-Length", strconv.Itoa(len(r.c.body)))
	}
	w.WriteHeader(r.Status)
	if method != http.MethodHead && !r.c.noBody {
		w.Write(r.c.body)
	}
}

// Rules returns the set's rules, in order (defaults filled in); none for a
// nil Set.
func (s *Set) Rules() []Rule {
	if s == nil {
		return nil
	}
	return s.rules
}

// HasAlways reports whether some rule answers Always.
func (s *Set) HasAlways() bool {
	for _, r := range s.Rules() {
		if r.When == Always {
			return true
		}
	}
	return false
}
