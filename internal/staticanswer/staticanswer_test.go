package staticanswer

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func mustCompile(t testing.TB, rules ...Rule) *Set {
	t.Helper()
	s, err := Compile(rules)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	return s
}

func headers(h map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := h[name]
		return v, ok
	}
}

func TestMatch(t *testing.T) {
	s := mustCompile(t,
		Rule{Name: "exact", PathType: Exact, Path: "/ping", Method: "GET"},
		Rule{Name: "prefix", PathType: PathPrefix, Path: "/healthz"},
		Rule{Name: "header", Path: "/probe", Headers: []Header{{Name: "X-Probe", Value: "lb"}}},
		Rule{Name: "slash-exact", PathType: Exact, Path: "/dir/"},
	)
	root := mustCompile(t, Rule{Name: "root", PathType: PathPrefix, Path: "/"})
	anyPath := mustCompile(t, Rule{Name: "any", Method: "OPTIONS"})
	for _, tc := range []struct {
		set            *Set
		method, target string
		hdr            map[string]string
		want           string // rule name; "" none
	}{
		{s, "GET", "/ping", nil, "exact"},
		{s, "GET", "/ping?x=1", nil, "exact"},
		{s, "HEAD", "/ping", nil, ""},
		{s, "get", "/ping", nil, ""},
		{s, "GET", "/ping/", nil, ""},
		{s, "GET", "/pingx", nil, ""},
		{s, "GET", "/healthz", nil, "prefix"},
		{s, "POST", "/healthz/live", nil, "prefix"},
		{s, "GET", "/healthz/", nil, "prefix"},
		{s, "GET", "/healthz?a=/../b", nil, "prefix"},
		{s, "GET", "/healthzx", nil, ""},
		{s, "GET", "/Healthz", nil, ""},
		{s, "GET", "/probe", map[string]string{"x-probe": "lb"}, "header"},
		{s, "GET", "/probe", map[string]string{"x-probe": "LB"}, ""},
		{s, "GET", "/probe", nil, ""},
		{s, "GET", "/dir/", nil, "slash-exact"},
		{s, "GET", "/dir", nil, ""},
		// Not canonical: never a match, whatever it decodes to.
		{s, "GET", "/%68ealthz", nil, ""},
		{s, "GET", "/healthz%2Flive", nil, ""},
		{s, "GET", "//healthz", nil, ""},
		{s, "GET", "/healthz//x", nil, ""},
		{s, "GET", "/healthz/../api", nil, ""},
		{s, "GET", "/healthz/./x", nil, ""},
		{s, "GET", "/healthz/..", nil, ""},
		{s, "GET", "/healthz/.", nil, ""},
		{s, "GET", "/./healthz", nil, ""},
		{s, "GET", "/healthz\\x", nil, ""},
		{s, "GET", "http://h/healthz", nil, ""},
		{s, "GET", "healthz", nil, ""},
		{s, "GET", "*", nil, ""},
		{s, "GET", "", nil, ""},
		{s, "GET", "/healthz#x", nil, ""},
		{s, "GET", "/healthz/\x00", nil, ""},
		{s, "GET", "/healthz/é", nil, ""},
		// A ';' parameter: Tomcat, Jetty and Spring strip it, then
		// resolve the dot segment (their /api).
		{s, "GET", "/healthz/..;/api", nil, ""},
		{s, "GET", "/healthz/.;/..;/api", nil, ""},
		{s, "GET", "/healthz/..;jsessionid=1/api", nil, ""},
		{s, "GET", "/healthz/live;x", nil, ""},
		{s, "GET", "/ping;x", nil, ""},
		{root, "GET", "/..;/x", nil, ""},
		// Dots inside a segment are not dot segments.
		{s, "GET", "/healthz/.well-known", nil, "prefix"},
		{s, "GET", "/healthz/...", nil, "prefix"},
		{root, "GET", "/", nil, "root"},
		{root, "GET", "/anything/at/all?q", nil, "root"},
		{root, "GET", "//x", nil, ""},
		{anyPath, "OPTIONS", "/x/y", nil, "any"},
		{anyPath, "OPTIONS", "/x/%79", nil, ""},
		{anyPath, "GET", "/x", nil, ""},
		{nil, "GET", "/", nil, ""},
	} {
		got := ""
		if r := tc.set.Match(tc.method, tc.target, headers(tc.hdr)); r != nil {
			got = r.Name
		}
		if got != tc.want {
			t.Errorf("Match(%q, %q, %v) = %q, want %q", tc.method, tc.target, tc.hdr, got, tc.want)
		}
		gotB := ""
		hb := func(name string) ([]byte, bool) {
			v, ok := tc.hdr[name]
			return []byte(v), ok
		}
		if r := tc.set.MatchBytes([]byte(tc.method), []byte(tc.target), hb); r != nil {
			gotB = r.Name
		}
		if gotB != got {
			t.Errorf("MatchBytes(%q, %q) = %q, Match gives %q", tc.method, tc.target, gotB, got)
		}
	}
}

func TestFirstRuleWins(t *testing.T) {
	s := mustCompile(t,
		Rule{Name: "one", Path: "/a"},
		Rule{Name: "two", Path: "/a/b"},
	)
	if r := s.Match("GET", "/a/b", nil); r == nil || r.Name != "one" || r.Index() != 0 {
		t.Errorf("got %v, want rule one", r)
	}
	if r := s.Match("GET", "/b", nil); r != nil {
		t.Errorf("got %v, want none", r)
	}
	if r := mustCompile(t, Rule{Name: "one", Path: "/x"}, Rule{Name: "two", Path: "/a/b"}).Match("GET", "/a/b", nil); r == nil || r.Name != "two" || r.Index() != 1 {
		t.Errorf("got %v, want rule two at 1", r)
	}
}

func TestExempts(t *testing.T) {
	s := mustCompile(t,
		Rule{Name: "at-zero", Path: "/a"},
		Rule{Name: "always", When: Always, Path: "/b"},
		Rule{Name: "at-zero-header", When: AtZero, Path: "/c", Headers: []Header{{Name: "X-A", Value: "1"}}},
	)
	got := map[string]bool{}
	for _, r := range s.Rules() {
		got[r.Name] = r.Exempts()
	}
	want := map[string]bool{"at-zero": true, "always": false, "at-zero-header": false}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("Exempts (-want +got):\n%s", d)
	}
}

func TestCompileRefuses(t *testing.T) {
	long := strings.Repeat("x", MaxBodyBytes+1)
	var many []Rule
	for i := range MaxRules + 1 {
		many = append(many, Rule{Name: "r" + string(rune('a'+i))})
	}
	var hdrs []Header
	for i := range MaxResponseHeaders + 1 {
		hdrs = append(hdrs, Header{Name: "X-" + string(rune('a'+i)), Value: "v"})
	}
	var matches []Header
	for i := range MaxHeaderMatches + 1 {
		matches = append(matches, Header{Name: "X-" + string(rune('a'+i)), Value: "v"})
	}
	for _, tc := range []struct {
		rules []Rule
		want  []string // substrings of the error
	}{
		{many, []string{"17 rules: at most 16"}},
		{[]Rule{{}}, []string{"rule 0: name: missing"}},
		{[]Rule{{Name: "a b"}}, []string{`rule "a b": name`}},
		{[]Rule{{Name: "a"}, {Name: "a"}}, []string{`rule "a": name: "a" is used by an earlier rule`}},
		{[]Rule{{Name: "a", When: "Never"}}, []string{`rule "a": when: "Never"`}},
		{[]Rule{{Name: "a", PathType: Exact}}, []string{`rule "a": path: missing`}},
		{[]Rule{{Name: "a", PathType: "Regex", Path: "/x"}}, []string{`rule "a": pathType: "Regex"`}},
		{[]Rule{{Name: "a", Path: "x"}}, []string{`rule "a": path: "x": want an absolute path`}},
		{[]Rule{{Name: "a", Path: "/x?y"}}, []string{"no query"}},
		{[]Rule{{Name: "a", Path: "/%78"}}, []string{"canonical form"}},
		{[]Rule{{Name: "a", Path: "//x"}}, []string{"canonical form"}},
		{[]Rule{{Name: "a", Path: "/x/../y"}}, []string{"canonical form"}},
		{[]Rule{{Name: "a", Path: "/x\\y"}}, []string{"canonical form"}},
		{[]Rule{{Name: "a", Path: "/x;y"}}, []string{"canonical form", "no ';'"}},
		{[]Rule{{Name: "a", Path: "/x/"}}, []string{`a PathPrefix has no trailing slash (write "/x")`}},
		{[]Rule{{Name: "a", Method: "G T"}}, []string{`rule "a": method`}},
		{[]Rule{{Name: "a", Headers: matches}}, []string{`rule "a": headers: 9: at most 8`}},
		{[]Rule{{Name: "a", Headers: []Header{{Name: "X", Value: "1"}, {Name: "x", Value: "2"}}}}, []string{`headers[1]: "x" is matched twice`}},
		{[]Rule{{Name: "a", Headers: []Header{{Name: "X:", Value: "1"}}}}, []string{`headers[0]: name "X:"`}},
		{[]Rule{{Name: "a", Status: 101}}, []string{`rule "a": status: 101`}},
		{[]Rule{{Name: "a", Status: 600}}, []string{`status: 600`}},
		{[]Rule{{Name: "a", Body: long}}, []string{`rule "a": body: 4097 bytes`}},
		{[]Rule{{Name: "a", Status: 204, Body: "x"}}, []string{"a 204 answer has no body"}},
		{[]Rule{{Name: "a", Status: 304, Body: "x"}}, []string{"a 304 answer has no body"}},
		{[]Rule{{Name: "a", ResponseHeaders: hdrs}}, []string{"responseHeaders: 17: at most 16"}},
		{[]Rule{{Name: "a", ResponseHeaders: []Header{{Name: "X", Value: "a\r\nEvil: 1"}}}}, []string{"responseHeaders[0]: X: value", "no CR, LF"}},
		{[]Rule{{Name: "a", ResponseHeaders: []Header{{Name: "X", Value: "a\x00"}}}}, []string{"no CR, LF, NUL"}},
		{[]Rule{{Name: "a", ResponseHeaders: []Header{{Name: "X", Value: "a\x7f"}}}}, []string{"control"}},
		{[]Rule{{Name: "a", ResponseHeaders: []Header{{Name: "X", Value: " a"}}}}, []string{"white space"}},
		{[]Rule{{Name: "a", ResponseHeaders: []Header{{Name: "Bad Name", Value: "a"}}}}, []string{`name "Bad Name"`}},
		{[]Rule{{Name: "a", ResponseHeaders: []Header{{Name: "content-length", Value: "5"}}}}, []string{"responseHeaders[0]: content-length: ebb writes the framing itself"}},
		{[]Rule{{Name: "a", ResponseHeaders: []Header{{Name: "Transfer-Encoding", Value: "chunked"}}}}, []string{"framing"}},
		{[]Rule{{Name: "a", ResponseHeaders: []Header{{Name: "Connection", Value: "close"}}}}, []string{"framing"}},
		{[]Rule{{Name: "a", ResponseHeaders: []Header{{Name: "Keep-Alive", Value: "1"}}}}, []string{"framing"}},
		{[]Rule{{Name: "a", ResponseHeaders: []Header{{Name: "Upgrade", Value: "x"}}}}, []string{"framing"}},
		{[]Rule{{Name: "a", ResponseHeaders: []Header{{Name: "TE", Value: "x"}}}}, []string{"framing"}},
		{[]Rule{{Name: "a", ResponseHeaders: []Header{{Name: "Trailer", Value: "x"}}}}, []string{"framing"}},
		{[]Rule{{Name: "a", ResponseHeaders: []Header{{Name: "Proxy-Connection", Value: "x"}}}}, []string{"framing"}},
		// Every problem at once.
		{[]Rule{{Name: "a", Status: 1}, {Name: "b", Path: "x"}}, []string{`rule "a": status`, `rule "b": path`}},
	} {
		_, err := Compile(tc.rules)
		if err == nil {
			t.Errorf("Compile(%+v): no error, want %q", tc.rules, tc.want)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("Compile(%+v) = %q, want it to contain %q", tc.rules, err, w)
			}
		}
	}
}

func TestCompileDefaults(t *testing.T) {
	s := mustCompile(t, Rule{Name: "a", Path: "/x"}, Rule{Name: "b"})
	want := []Rule{
		{Name: "a", When: AtZero, PathType: PathPrefix, Path: "/x", Status: 200},
		{Name: "b", When: AtZero, Status: 200},
	}
	if d := cmp.Diff(want, s.Rules(), cmpopts.IgnoreUnexported(Rule{}), cmpopts.EquateEmpty()); d != "" {
		t.Errorf("rules (-want +got):\n%s", d)
	}
	if s, err := Compile(nil); s != nil || err != nil {
		t.Errorf("Compile(nil) = %v, %v; want nil, nil", s, err)
	}
}

func TestAppendResponse(t *testing.T) {
	s := mustCompile(t,
		Rule{Name: "ok", Path: "/ok", Body: "fine\n", ResponseHeaders: []Header{{Name: "Cache-Control", Value: "no-store"}, {Name: "Set-Cookie", Value: "a=1"}, {Name: "Set-Cookie", Value: "b=2"}}},
		Rule{Name: "typed", Path: "/typed", Status: 503, Body: "{}", ResponseHeaders: []Header{{Name: "content-type", Value: "application/json"}}},
		Rule{Name: "empty", Path: "/empty"},
		Rule{Name: "no-content", Path: "/204", Status: 204, ResponseHeaders: []Header{{Name: "X-A", Value: "1"}}},
		Rule{Name: "not-modified", Path: "/304", Status: 304},
		Rule{Name: "odd", Path: "/299", Status: 299},
	)
	for _, tc := range []struct {
		target     string
		head, keep bool
		want       string
	}{
		{"/ok", false, true, "HTTP/1.1 200 OK\r\nCache-Control: no-store\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 5\r\n\r\nfine\n"},
		{"/ok", true, true, "HTTP/1.1 200 OK\r\nCache-Control: no-store\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 5\r\n\r\n"},
		{"/ok", false, false, "HTTP/1.1 200 OK\r\nCache-Control: no-store\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 5\r\nConnection: close\r\n\r\nfine\n"},
		{"/typed", false, true, "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nContent-Length: 2\r\n\r\n{}"},
		{"/empty", false, true, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"},
		{"/204", false, true, "HTTP/1.1 204 No Content\r\nX-A: 1\r\n\r\n"},
		{"/304", false, false, "HTTP/1.1 304 Not Modified\r\nConnection: close\r\n\r\n"},
		{"/299", false, true, "HTTP/1.1 299 \r\nContent-Length: 0\r\n\r\n"},
	} {
		r := s.Match("GET", tc.target, nil)
		if got := string(r.AppendResponse(nil, tc.head, tc.keep)); got != tc.want {
			t.Errorf("%s head=%v keep=%v:\n got %q\nwant %q", tc.target, tc.head, tc.keep, got, tc.want)
		}
	}
}

func TestWriteHTTP(t *testing.T) {
	s := mustCompile(t,
		Rule{Name: "ok", Path: "/ok", Status: 418, Body: "tea", ResponseHeaders: []Header{{Name: "X-A", Value: "1"}}},
		Rule{Name: "no-content", Path: "/204", Status: 204},
	)
	for _, tc := range []struct {
		method, target string
		code           int
		hdr            map[string][]string
		body           string
	}{
		{"GET", "/ok", 418, map[string][]string{"X-A": {"1"}, "Content-Type": {"text/plain; charset=utf-8"}, "Content-Length": {"3"}}, "tea"},
		{"HEAD", "/ok", 418, map[string][]string{"X-A": {"1"}, "Content-Type": {"text/plain; charset=utf-8"}, "Content-Length": {"3"}}, ""},
		{"GET", "/204", 204, map[string][]string{}, ""},
	} {
		w := httptest.NewRecorder()
		s.Match(tc.method, tc.target, nil).WriteHTTP(w, tc.method)
		got := map[string][]string(w.Header())
		if w.Code != tc.code || w.Body.String() != tc.body {
			t.Errorf("%s %s: %d %q, want %d %q", tc.method, tc.target, w.Code, w.Body, tc.code, tc.body)
		}
		if d := cmp.Diff(tc.hdr, got, cmpopts.EquateEmpty()); d != "" {
			t.Errorf("%s %s headers (-want +got):\n%s", tc.method, tc.target, d)
		}
	}
}

func TestJSONRoundTrip(t *testing.T) {
	in := `[{"name":"healthz","when":"Always","pathType":"Exact","path":"/healthz","method":"GET",` +
		`"headers":[{"name":"X-Probe","value":"lb"}],"status":200,` +
		`"responseHeaders":[{"name":"Cache-Control","value":"no-store"}],"body":"ok\n"},` +
		`{"name":"robots","when":"AtZero","pathType":"PathPrefix","path":"/robots.txt","status":404}]`
	s, err := Parse(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(s.Rules())
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != in {
		t.Errorf("round trip:\n got %s\nwant %s", out, in)
	}
	for _, bad := range []string{`{}`, `[{"name":"a","nope":1}]`, `[{"name":"a"}] []`, `[{"name":"a","status":"200"}]`} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%s): no error", bad)
		}
	}
	if s, err := Parse(""); s != nil || err != nil {
		t.Errorf(`Parse("") = %v, %v; want nil, nil`, s, err)
	}
}

func TestMatchAllocatesNothing(t *testing.T) {
	s := mustCompile(t,
		Rule{Name: "a", Path: "/healthz"},
		Rule{Name: "b", Path: "/probe", Headers: []Header{{Name: "X-Probe", Value: "lb"}}},
	)
	method, target := []byte("GET"), []byte("/probe/x?y=1")
	v := []byte("lb")
	hdr := func(string) ([]byte, bool) { return v, true }
	var buf []byte
	n := testing.AllocsPerRun(100, func() {
		r := s.MatchBytes(method, target, hdr)
		if r == nil || r.Name != "b" {
			t.Fatal("no match")
		}
		buf = r.AppendResponse(buf[:0], false, true)
		if s.MatchBytes(method, []byte("/api"), hdr) != nil {
			t.Fatal("match")
		}
	})
	if n != 0 {
		t.Errorf("%v allocations a match and an answer", n)
	}
}

// FuzzMatch: Match never panics, agrees with MatchBytes, and a target
// whose path is not in canonical form never matches; a match is one a
// plain reading of the rules gives.
func FuzzMatch(f *testing.F) {
	for _, s := range []string{"/healthz", "/healthz/x", "/%68ealthz", "//healthz", "/healthz/../api", "/a?b", "*", "", "/healthzx", "/.", "/x/./y", "/healthz/..;/api", "/healthz/.;x/api", "/healthz;x"} {
		f.Add("GET", s, "lb")
	}
	s := mustCompile(f,
		Rule{Name: "p", Path: "/healthz"},
		Rule{Name: "e", PathType: Exact, Path: "/ping", Method: "GET"},
		Rule{Name: "h", Path: "/probe", Headers: []Header{{Name: "X-Probe", Value: "lb"}}},
		Rule{Name: "root", Method: "OPTIONS", Path: "/"},
	)
	f.Fuzz(func(t *testing.T, method, target, hv string) {
		hdr := func(string) (string, bool) { return hv, true }
		r := s.Match(method, target, hdr)
		rb := s.MatchBytes([]byte(method), []byte(target), func(string) ([]byte, bool) { return []byte(hv), true })
		if r != rb {
			t.Fatalf("Match %v, MatchBytes %v", r, rb)
		}
		path, _, _ := strings.Cut(target, "?")
		if canonical(path) != canonicalRef(path) {
			t.Fatalf("canonical(%q) = %v, the plain reading says %v", path, canonical(path), canonicalRef(path))
		}
		if r == nil {
			return
		}
		if !canonicalRef(path) {
			t.Fatalf("%q matched rule %q but its path is not canonical", target, r.Name)
		}
		if r.Method != "" && r.Method != method {
			t.Fatalf("%q %q matched rule %q of method %q", method, target, r.Name, r.Method)
		}
		switch {
		case r.PathType == Exact && path != r.Path,
			r.PathType == PathPrefix && r.Path != "/" && path != r.Path && !strings.HasPrefix(path, r.Path+"/"):
			t.Fatalf("%q matched rule %q (%s %s)", target, r.Name, r.PathType, r.Path)
		}
	})
}

// canonicalRef is canonical written plainly, for the fuzz test.
func canonicalRef(p string) bool {
	if !strings.HasPrefix(p, "/") || strings.ContainsAny(p, "%\\#;") {
		return false
	}
	for _, c := range []byte(p) {
		if c <= ' ' || c >= 0x7f {
			return false
		}
	}
	segs := strings.Split(p[1:], "/")
	for i, seg := range segs {
		if seg == "." || seg == ".." || (seg == "" && i < len(segs)-1) {
			return false
		}
	}
	return true
}
