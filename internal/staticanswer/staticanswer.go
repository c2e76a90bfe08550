package staticanswer

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// When a rule answers (Rule.When).
const (
	// AtZero: only while the app has no ready pod (the activator answers);
	// a warm app gets the request.
	AtZero = "AtZero"
	// Always: at zero (the activator) and warm (the sidecar); the app
	// never sees the request.
	Always = "Always"
)

// Path match types (Rule.PathType), as Gateway API's.
const (
	Exact      = "Exact"
	PathPrefix = "PathPrefix"
)

// Bounds of a rule set; Compile refuses more.
const (
	MaxRules           = 16
	MaxBodyBytes       = 4096
	MaxResponseHeaders = 16
	MaxHeaderMatches   = 8
	maxPath            = 1024
	maxName            = 63
	maxHeaderName      = 256
	maxHeaderValue     = 4096
)

// Header is a header field: a name and a value.
type Header struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Rule is one static response: which requests (every condition given must
// hold), when, and the answer. Its JSON form, an array of them, is the
// sidecar's --static-responses (EBB_STATIC_RESPONSES).
type Rule struct {
	// Name is unique in a set; in logs and metrics.
	Name string `json:"name"`
	// When is AtZero or Always; empty is AtZero.
	When string `json:"when,omitempty"`
	// PathType is Exact or PathPrefix; empty is PathPrefix when Path is
	// set, and any path when it is not.
	PathType string `json:"pathType,omitempty"`
	// Path is an absolute path in canonical form (no query).
	Path string `json:"path,omitempty"`
	// Method must equal the request's; empty: any method.
	Method string `json:"method,omitempty"`
	// Headers must all be present, each once, with exactly this value;
	// names match without regard to case.
	Headers []Header `json:"headers,omitempty"`
	// Status of the answer, 200 to 599; 0 is 200.
	Status int `json:"status,omitempty"`
	// ResponseHeaders of the answer; Content-Type is text/plain;
	// charset=utf-8 for a body unless given here.
	ResponseHeaders []Header `json:"responseHeaders,omitempty"`
	// Body of the answer, at most MaxBodyBytes; none for 204 and 304.
	Body string `json:"body,omitempty"`

	c *compiled // set by Compile
}

// compiled is what Compile derives from a rule for the hot path.
type compiled struct {
	index  int      // in the Set
	prefix bool     // PathType is PathPrefix
	any    bool     // no path condition
	lower  []string // Headers' names, lower case
	// head is the status line and header lines, Content-Length included
	// (but for 204 and 304), without the blank line.
	head   []byte
	body   []byte
	noBody bool // 204 or 304
}

// Set is a compiled, immutable rule set. A nil Set matches nothing.
type Set struct {
	rules []Rule
}

// Parse decodes a JSON array of rules (the sidecar's --static-responses)
// and compiles it; an empty string is no rule (a nil Set).
func Parse(s string) (*Set, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	d := json.NewDecoder(strings.NewReader(s))
	d.DisallowUnknownFields()
	var rules []Rule
	if err := d.Decode(&rules); err != nil {
		return nil, fmt.Errorf("want a JSON array of rules: %w", err)
	}
	if d.More() {
		return nil, errors.New("want one JSON array of rules: there is more after it")
	}
	return Compile(rules)
}

// Compile validates rules and precomputes their answers; it returns every
// problem at once, each naming its rule and field. No rule is a nil Set.
func Compile(rules []Rule) (*Set, error) {
	var problems []error
	if len(rules) > MaxRules {
		problems = append(problems, fmt.Errorf("%d rules: at most %d", len(rules), MaxRules))
	}
	seen := make(map[string]bool, len(rules))
	s := &Set{rules: make([]Rule, 0, len(rules))}
	for i, r := range rules {
		where := fmt.Sprintf("rule %d", i)
		if r.Name != "" {
			where = fmt.Sprintf("rule %q", r.Name)
		}
		bad := func(field, format string, a ...any) {
			problems = append(problems, fmt.Errorf("%s: %s: %s", where, field, fmt.Sprintf(format, a...)))
		}
		switch {
		case r.Name == "":
			bad("name", "missing")
		case len(r.Name) > maxName || !isToken(r.Name):
			bad("name", "%q: want at most %d letters, digits and '-'", r.Name, maxName)
		case seen[r.Name]:
			bad("name", "%q is used by an earlier rule", r.Name)
		}
		seen[r.Name] = true
		c := &compiled{index: len(s.rules)}
		switch r.When {
		case "":
			r.When = AtZero
		case AtZero, Always:
		default:
			bad("when", "%q: want %s or %s", r.When, AtZero, Always)
		}
		switch {
		case r.Path == "" && r.PathType != "":
			bad("path", "missing (pathType %s needs one)", r.PathType)
		case r.Path == "":
			c.any = true
		default:
			if r.PathType == "" {
				r.PathType = PathPrefix
			}
			if why := checkPath(r.Path); why != "" {
				bad("path", "%q: %s", r.Path, why)
			}
			switch r.PathType {
			case Exact:
			case PathPrefix:
				c.prefix = true
				if r.Path != "/" && strings.HasSuffix(r.Path, "/") {
					bad("path", "%q: a PathPrefix has no trailing slash (write %q)", r.Path, strings.TrimRight(r.Path, "/"))
				}
			default:
				bad("pathType", "%q: want %s or %s", r.PathType, Exact, PathPrefix)
			}
		}
		if r.Method != "" && !isToken(r.Method) {
			bad("method", "%q is not a method (a token)", r.Method)
		}
		if len(r.Headers) > MaxHeaderMatches {
			bad("headers", "%d: at most %d", len(r.Headers), MaxHeaderMatches)
		}
		names := map[string]bool{}
		for j, h := range r.Headers {
			field := fmt.Sprintf("headers[%d]", j)
			if why := checkHeader(h); why != "" {
				bad(field, "%s", why)
			}
			l := strings.ToLower(h.Name)
			if names[l] {
				bad(field, "%q is matched twice", h.Name)
			}
			names[l] = true
			c.lower = append(c.lower, l)
		}
		if r.Status == 0 {
			r.Status = http.StatusOK
		}
		if r.Status < 200 || r.Status > 599 {
			bad("status", "%d: want 200 to 599", r.Status)
		}
		c.noBody = r.Status == http.StatusNoContent || r.Status == http.StatusNotModified
		if len(r.Body) > MaxBodyBytes {
			bad("body", "%d bytes: at most %d", len(r.Body), MaxBodyBytes)
		}
		if c.noBody && r.Body != "" {
			bad("body", "a %d answer has no body", r.Status)
		}
		if len(r.ResponseHeaders) > MaxResponseHeaders {
			bad("responseHeaders", "%d: at most %d", len(r.ResponseHeaders), MaxResponseHeaders)
		}
		for j, h := range r.ResponseHeaders {
			field := fmt.Sprintf("responseHeaders[%d]", j)
			if why := checkHeader(h); why != "" {
				bad(field, "%s", why)
			} else if framing[strings.ToLower(h.Name)] {
				bad(field, "%s: ebb writes the framing itself; remove Content-Length, Transfer-Encoding, Connection, Keep-Alive, Upgrade, TE, Trailer and Proxy-Connection", h.Name)
			}
		}
		r.Headers = append([]Header(nil), r.Headers...)
		r.ResponseHeaders = append([]Header(nil), r.ResponseHeaders...)
		c.head, c.body = wireHead(&r, c.noBody), []byte(r.Body)
		r.c = c
		s.rules = append(s.rules, r)
	}
	if err := errors.Join(problems...); err != nil {
		return nil, err
	}
	if len(s.rules) == 0 {
		return nil, nil
	}
	return s, nil
}

// framing are the response headers a rule may not set: ebb frames the
// answer and decides the connection's fate itself.
var framing = map[string]bool{
	"content-length": true, "transfer-encoding": true, "connection": true, "keep-alive": true,
	"upgrade": true, "te": true, "trailer": true, "proxy-connection": true,
}

// wireHead is the answer's status line and header lines, Content-Length
// included (but for 204 and 304), without the blank line that ends it.
func wireHead(r *Rule, noBody bool) []byte {
	b := []byte("HTTP/1.1 ")
	b = strconv.AppendInt(b, int64(r.Status), 10)
	b = append(b, ' ')
	b = append(b, http.StatusText(r.Status)...)
	b = append(b, "\r\n"...)
	typed := false
	for _, h := range r.ResponseHeaders {
		b = append(b, h.Name...)
		b = append(b, ": "...)
		b = append(b, h.Value...)
		b = append(b, "\r\n"...)
		typed = typed || strings.EqualFold(h.Name, "content-type")
	}
	if !noBody {
		if !typed && r.Body != "" {
			b = append(b, "Content-Type: text/plain; charset=utf-8\r\n"...)
		}
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, int64(len(r.Body)), 10)
		b = append(b, "\r\n"...)
	}
	return b
}

// checkPath says what is wrong with a rule's path, or "".
func checkPath(p string) string {
	switch {
	case len(p) > maxPath:
		return fmt.Sprintf("longer than %d bytes", maxPath)
	case !strings.HasPrefix(p, "/"):
		return "want an absolute path starting with /"
	case strings.ContainsAny(p, "?#"):
		return "a path has no query or fragment"
	}
	if !canonical(p) {
		return "want a path in canonical form: no percent-encoding, no empty, . or .. segment, no backslash, no ';', only visible ASCII"
	}
	return ""
}

// checkHeader says what is wrong with a header of a rule, or "".
func checkHeader(h Header) string {
	switch {
	case h.Name == "":
		return "name missing"
	case len(h.Name) > maxHeaderName || !isToken(h.Name):
		return fmt.Sprintf("name %q is not a header name (a token)", h.Name)
	case len(h.Value) > maxHeaderValue:
		return fmt.Sprintf("%s: value longer than %d bytes", h.Name, maxHeaderValue)
	case strings.TrimLeft(h.Value, " \t") != h.Value || strings.TrimRight(h.Value, " \t") != h.Value:
		return fmt.Sprintf("%s: value %q begins or ends with white space", h.Name, h.Value)
	}
	for i := 0; i < len(h.Value); i++ {
		if c := h.Value[i]; (c < 0x20 && c != '\t') || c >= 0x7f {
			return fmt.Sprintf("%s: value %q: want visible ASCII, spaces and tabs (no CR, LF, NUL or other control characters)", h.Name, h.Value)
		}
	}
	return ""
}

// tokenChars are the characters of a token (RFC 9110 section 5.6.2).
var tokenChars = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		if !tokenChars[s[i]] {
			return false
		}
	}
	return s != ""
}
