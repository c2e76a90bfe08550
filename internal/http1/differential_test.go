package http1

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/net/http/httpguts"
)

// The differential tests feed the same bytes to the engine's parsers and to
// the standard library's (http.ReadRequest plus the checks net/http's
// server adds, and http.ReadResponse), and fail when one accepts what the
// other refuses or when they frame the message differently: where the body
// ends (the bytes left after the message), its framing (none, length,
// chunked, until close) and, for HTTP/1.1, whether the connection closes.
// The deliberate differences are listed in requestAllowed and
// responseAllowed, each with its reason.

// verdict is what a parser made of one message.
type verdict struct {
	ok      bool
	framing string
	rest    int // bytes of the input after the message, body included
	close   bool
	// body: a chunked body as decoded (net/http), or as the engine re-frames
	// it to send on (the engine).
	body []byte
}

func (v verdict) String() string {
	if !v.ok {
		return "refused"
	}
	return fmt.Sprintf("framing=%s rest=%d close=%v", v.framing, v.rest, v.close)
}

// readBody consumes a body framed by f from br; a chunked body is re-framed
// as the engine sends it on, into out.
func readBody(br *bufio.Reader, f *framing, out *[]byte) error {
	for !f.done() {
		if br.Buffered() == 0 {
			if _, err := br.Peek(1); err != nil {
				if f.kind == bodyClose && err == io.EOF {
					return nil
				}
				return err
			}
		}
		b, _ := br.Peek(br.Buffered())
		var n int
		var err error
		if f.kind == bodyChunked {
			n, *out, err = f.reframe(b, *out)
		} else {
			n, err = f.consume(b)
		}
		br.Discard(n)
		if err != nil {
			return err
		}
	}
	return nil
}

// checkReframed holds a chunked body as the engine re-frames it to what
// net/http decoded of the original: net/http decodes the re-framed body to
// the same bytes, and the engine's own scanner takes it whole, every size
// line in minimal hex without extensions.
func checkReframed(t *testing.T, raw []byte, ours, std verdict) {
	t.Helper()
	if !ours.ok || !std.ok || ours.framing != "chunked" || std.framing != "chunked" {
		return
	}
	got, err := io.ReadAll(httputil.NewChunkedReader(bytes.NewReader(ours.body)))
	if err != nil || !bytes.Equal(got, std.body) {
		t.Fatalf("message %q\nre-framed %q\nnet/http decodes it to %q (%v), and the original to %q", raw, ours.body, got, err, std.body)
	}
	var f framing
	f.reset(bodyChunked, 0)
	if n, err := f.consume(ours.body); err != nil || n != len(ours.body) || !f.done() {
		t.Fatalf("message %q\nre-framed %q: the engine's scanner takes %d bytes, done %v, %v", raw, ours.body, n, f.done(), err)
	}
	// Walk the chunks: every size line is minimal hex, nothing after it;
	// after the last chunk come the trailer fields, which are not size
	// lines (a field value may hold a ';').
	for rest := ours.body; ; {
		line, after, ok := bytes.Cut(rest, []byte("\r\n"))
		size, err := strconv.ParseUint(string(line), 16, 63)
		if !ok || err != nil || strconv.FormatUint(size, 16) != string(line) {
			t.Fatalf("message %q\nre-framed %q: size line %q is not minimal hex alone (an extension went on?)", raw, ours.body, line)
		}
		if size == 0 {
			break
		}
		rest = after[size+2:] // the scanner took it whole: the data and its CRLF are there
	}
}

func ourRequest(raw []byte) (v verdict, http10, h2 bool) {
	src := bytes.NewReader(raw)
	br := bufio.NewReaderSize(src, 64<<10)
	cc := &Conn{o: &Options{Name: "ebb-test", MaxHeaderBytes: 1 << 20}, br: br, ip: []byte("10.0.0.9")}
	_, err := cc.readRequest()
	rq := &cc.req.rq
	if err != nil {
		return v, rq.http10, err == errH2Preface
	}
	var f framing
	switch {
	case rq.chunked:
		f.reset(bodyChunked, 0)
		v.framing = "chunked"
	case rq.cl > 0:
		f.reset(bodyLength, rq.cl)
		v.framing = fmt.Sprintf("length %d", rq.cl)
	default:
		v.framing = "none"
	}
	if err := readBody(br, &f, &v.body); err != nil {
		return v, rq.http10, false
	}
	v.ok = true
	v.rest = br.Buffered() + src.Len()
	v.close = rq.closeAfter
	return v, rq.http10, false
}

// stdRequest is what net/http's server makes of raw: http.ReadRequest, the
// checks its conn.readRequest adds (version, Host, header names and
// values), then the body.
func stdRequest(raw []byte) verdict {
	var v verdict
	src := bytes.NewReader(raw)
	br := bufio.NewReaderSize(src, 64<<10)
	req, err := http.ReadRequest(br)
	if err != nil {
		return v
	}
	if req.ProtoMajor != 1 {
		return v
	}
	// ReadRequest drops the Host header from the map; read it again.
	tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(raw)))
	tp.ReadLine()
	hdr, _ := tp.ReadMIMEHeader()
	hosts := hdr["Host"]
	if req.ProtoAtLeast(1, 1) && len(hosts) == 0 && req.Method != "CONNECT" {
		return v
	}
	if len(hosts) == 1 && !httpguts.ValidHostHeader(hosts[0]) {
		return v
	}
	for k, vv := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return v
		}
		for _, val := range vv {
			if !httpguts.ValidHeaderFieldValue(val) {
				return v
			}
		}
	}
	switch {
	case len(req.TransferEncoding) > 0:
		v.framing = "chunked"
	case req.ContentLength > 0:
		v.framing = fmt.Sprintf("length %d", req.ContentLength)
	default:
		v.framing = "none"
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return v
	}
	if v.framing == "chunked" {
		v.body = body
	}
	v.ok = true
	v.rest = br.Buffered() + src.Len()
	v.close = req.Close
	return v
}

// splitHead splits raw at the end of its first head (the first empty line,
// lines ending in CRLF or LF): the head's lines after the start line, and
// what follows the head.
func splitHead(raw []byte) (lines [][]byte, body []byte) {
	first := true
	for len(raw) > 0 {
		line, rest, found := bytes.Cut(raw, []byte("\n"))
		raw = rest
		line = bytes.TrimSuffix(line, []byte("\r"))
		if len(line) == 0 && found {
			return lines, raw
		}
		if !first {
			lines = append(lines, line)
		}
		first = false
	}
	return lines, nil
}

// headLines returns the lines of a message's first head after its start
// line.
func headLines(raw []byte) [][]byte {
	lines, _ := splitHead(raw)
	return lines
}

func hasHeader(lines [][]byte, name string) bool {
	for _, l := range lines {
		if i := bytes.IndexByte(l, ':'); i > 0 && eqFold(bytes.TrimSpace(l[:i]), name) {
			return true
		}
	}
	return false
}

func hasObsFold(lines [][]byte) bool {
	for _, l := range lines {
		if len(l) > 0 && (l[0] == ' ' || l[0] == '\t') {
			return true
		}
	}
	return false
}

// hasOddChunkBytes reports whether a chunk-size line of the body carries an
// extension with bytes other than a field value's, a trailer name is not a
// token or a trailer is folded (net/http ignores extensions, does not check
// trailer names and joins folded lines).
func hasOddChunkBytes(raw []byte) bool {
	_, body := splitHead(raw)
	for _, l := range bytes.Split(body, []byte("\n")) {
		l = bytes.TrimSuffix(l, []byte("\r"))
		if len(l) > 0 && (l[0] == ' ' || l[0] == '\t') {
			return true // obs-fold in a trailer: net/http joins the lines
		}
		if j := bytes.IndexByte(l, ';'); j >= 0 && !all(l[j:], &valueChars) {
			return true
		}
		if j := bytes.IndexByte(l, ':'); j > 0 && !isToken(l[:j]) {
			return true
		}
	}
	return false
}

// hasBareLFInChunkLines reports whether a chunk-size line, the CRLF after
// a chunk's data or a trailer line (the empty one that ends them included)
// of a chunked body ends in a LF without its CR. The engine refuses it:
// RFC 9112 section 7.1 frames chunks with CRLF (and trailer lines go on as
// received). net/http takes LF alone. LF bytes inside a
// chunk's data are content and do not count.
func hasBareLFInChunkLines(raw []byte) bool {
	_, body := splitHead(raw)
	line := func() ([]byte, bool, bool) { // the line, whether it ends in CRLF, whether there was one
		i := bytes.IndexByte(body, '\n')
		if i < 0 {
			return nil, false, false
		}
		l := body[:i]
		body = body[i+1:]
		if bytes.HasSuffix(l, []byte("\r")) {
			return l[:len(l)-1], true, true
		}
		return l, false, true
	}
	for {
		l, crlf, ok := line()
		if !ok {
			return false
		}
		if !crlf {
			return true
		}
		end := 0
		for end < len(l) && strings.IndexByte("0123456789abcdefABCDEF", l[end]) >= 0 {
			end++
		}
		size, err := strconv.ParseInt(string(l[:end]), 16, 64)
		if err != nil || size < 0 || size > int64(len(body)) {
			return false // some other fault, or the body ends in the data
		}
		if size == 0 {
			for {
				l, crlf, ok := line()
				if !ok {
					return false
				}
				if !crlf {
					return true
				}
				if len(l) == 0 {
					return false
				}
			}
		}
		body = body[size:]
		if !bytes.HasPrefix(body, []byte("\r\n")) {
			return bytes.HasPrefix(body, []byte("\n"))
		}
		body = body[2:]
	}
}

// requestAllowed returns why a difference on a request is deliberate, or
// "" when it is not.
func requestAllowed(raw []byte, ours, std verdict, http10 bool) string {
	lines := headLines(raw)
	switch {
	case hasObsFold(lines):
		return "obsolete line folding: refused (RFC 9112 section 5.2 allows it); net/http joins the lines"
	case !ours.ok && hasHeader(lines, "transfer-encoding") && hasHeader(lines, "content-length"):
		return "Content-Length and Transfer-Encoding both: refused as RFC 9112 section 6.1 allows (a smuggling attempt); net/http drops the Content-Length"
	case !ours.ok && http10 && hasHeader(lines, "transfer-encoding"):
		return "Transfer-Encoding in HTTP/1.0: refused (RFC 9112 section 6.1: the framing is faulty); net/http ignores the header"
	case !ours.ok && bytes.HasPrefix(raw, []byte("CONNECT ")):
		return "CONNECT: refused with 405 (the engine is no forward proxy)"
	case ours.ok && std.ok && http10 && ours.framing == std.framing && ours.rest == std.rest:
		return "HTTP/1.0 keep-alive: the engine closes after every HTTP/1.0 response"
	case !ours.ok && func() bool {
		for _, l := range lines {
			if i := bytes.IndexByte(l, ':'); i > 0 && bytes.IndexByte(l[:i], '_') >= 0 &&
				(eqFoldDash(l[:i], "content-length") || eqFoldDash(l[:i], "transfer-encoding")) {
				return true
			}
		}
		return false
	}():
		return "Content_Length, Transfer_Encoding: refused, since servers that read _ as - (CGI, WSGI) would frame by them; net/http takes them as unknown headers"
	case !ours.ok && std.ok && hasBareLFInChunkLines(raw):
		return "a chunked body's size, data-ending or trailer line ending in a bare LF: refused (RFC 9112 section 7.1 frames chunks with CRLF; trailer lines go on as received); net/http takes LF alone"
	case !ours.ok && std.ok && hasOddChunkBytes(raw):
		return "chunk extensions with control bytes, trailer names that are not tokens, folded trailers: refused; net/http discards extensions, does not check trailer names and joins folded lines"
	}
	return ""
}

func FuzzDifferentialRequest(f *testing.F) {
	for _, s := range differentialRequestSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) > 0 && (raw[0] == '\r' || raw[0] == '\n') {
			// Deliberate: up to four empty lines before a request line are
			// ignored (RFC 9112 section 2.2); net/http does so only after a
			// POST.
			return
		}
		ours, http10, h2 := ourRequest(raw)
		if h2 {
			return // the HTTP/2 preface goes to the h2c server
		}
		std := stdRequest(raw)
		if ours.ok == std.ok && (!ours.ok || ours.framing == std.framing && ours.rest == std.rest && (http10 || ours.close == std.close)) {
			checkReframed(t, raw, ours, std)
			return
		}
		if why := requestAllowed(raw, ours, std, http10); why != "" {
			t.Logf("allowed difference (%s)", why)
			return
		}
		t.Fatalf("request %q\nengine:   %v\nnet/http: %v", raw, ours, std)
	})
}

func ourResponse(raw []byte, method string) verdict {
	var v verdict
	src := bytes.NewReader(raw)
	br := bufio.NewReaderSize(src, 64<<10)
	cc := &Conn{o: &Options{Name: "ebb-test"}}
	rq := &Request{isHead: method == "HEAD", upgrade: true}
	var rs response
	for {
		if err := cc.readOneResponseHead(br, rq, &rs); err != nil {
			return v
		}
		if rs.code >= 200 || rs.code == 101 {
			break
		}
	}
	var f framing
	switch {
	case rs.code == 101:
		v.framing = "tunnel"
	case rq.isHead || rs.code == 204 || rs.code == 304:
		v.framing = "none"
	case rs.chunked:
		f.reset(bodyChunked, 0)
		v.framing = "chunked"
	case rs.cl >= 0:
		f.reset(bodyLength, rs.cl)
		v.framing = fmt.Sprintf("length %d", rs.cl)
	default:
		f.reset(bodyClose, 0)
		v.framing = "close"
	}
	if v.framing != "tunnel" {
		if err := readBody(br, &f, &v.body); err != nil {
			return v
		}
	}
	v.ok = true
	v.rest = br.Buffered() + src.Len()
	v.close = rs.close
	return v
}

func stdResponse(raw []byte, method string) (verdict, *http.Response) {
	var v verdict
	src := bytes.NewReader(raw)
	br := bufio.NewReaderSize(src, 64<<10)
	var resp *http.Response
	for {
		var err error
		resp, err = http.ReadResponse(br, &http.Request{Method: method})
		if err != nil {
			return v, nil
		}
		if resp.StatusCode >= 200 || resp.StatusCode == 101 {
			break
		}
	}
	chunked := len(resp.TransferEncoding) > 0 && resp.TransferEncoding[0] == "chunked"
	switch {
	case resp.StatusCode == 101:
		v.framing = "tunnel"
	case method == "HEAD" || resp.StatusCode == 204 || resp.StatusCode == 304:
		v.framing = "none"
	case chunked:
		v.framing = "chunked"
	case resp.ContentLength >= 0:
		v.framing = fmt.Sprintf("length %d", resp.ContentLength)
	default:
		v.framing = "close"
	}
	if v.framing != "tunnel" {
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return v, resp
		}
		if v.framing == "chunked" {
			v.body = body
		}
	}
	v.ok = true
	v.rest = br.Buffered() + src.Len()
	v.close = resp.Close
	return v, resp
}

// responseHeads splits raw into the heads of its 1xx responses and of the
// final one (each as lines, the status line first), as far as they go.
func responseHeads(raw []byte) [][][]byte {
	var heads [][][]byte
	for len(raw) > 0 {
		var head [][]byte
		for len(raw) > 0 {
			line, rest, _ := bytes.Cut(raw, []byte("\n"))
			raw = rest
			line = bytes.TrimSuffix(line, []byte("\r"))
			if len(line) == 0 {
				break
			}
			head = append(head, line)
		}
		if len(head) == 0 {
			break
		}
		heads = append(heads, head)
		if st := head[0]; len(st) < 10 || st[9] != '1' || bytes.HasPrefix(st[9:], []byte("101")) {
			break // a final response: the body follows
		}
	}
	return heads
}

// responseAllowed returns why a difference on a response is deliberate, or
// "" when it is not. The engine is strict with the app: a response it
// refuses gets the client a 502, and the connection to the app is closed.
func responseAllowed(raw []byte, ours, std verdict) string {
	if ours.ok {
		return ""
	}
	for _, head := range responseHeads(raw) {
		status, lines := head[0], head[1:]
		switch {
		case hasObsFold(lines):
			return "obsolete line folding: refused; net/http joins the lines"
		case hasHeader(lines, "transfer-encoding") && (hasHeader(lines, "content-length") || bytes.HasPrefix(status, []byte("HTTP/1.0"))):
			return "Transfer-Encoding with Content-Length, or in HTTP/1.0: refused (RFC 9112 section 6.1); net/http lets one win"
		case len(status) < 9 || !bytes.HasPrefix(status, []byte("HTTP/1.0 ")) && !bytes.HasPrefix(status, []byte("HTTP/1.1 ")):
			return "a version other than HTTP/1.0 or HTTP/1.1: refused; net/http takes any HTTP/x.y"
		case len(status) >= 12 && (status[9] < '1' || status[9] > '9'):
			return "a status code below 100: refused; net/http takes any three digits"
		case len(status) > 13 && !all(status[13:], &reasonChars):
			return "control bytes in the reason phrase: refused; net/http does not check it"
		}
		for _, l := range lines {
			if i := bytes.IndexByte(l, ':'); i > 0 && !isToken(l[:i]) {
				return "a field name that is not a token (white space before the colon): refused; net/http's client keeps it as an unknown header"
			}
		}
	}
	if hasOddChunkBytes(raw) {
		return "chunk extensions with control bytes, trailer names that are not tokens: refused; net/http does not check them"
	}
	if hasBareLFInChunkLines(raw) {
		return "a chunked body's size, data-ending or trailer line ending in a bare LF: refused (RFC 9112 section 7.1); net/http takes LF alone"
	}
	return ""
}

func FuzzDifferentialResponse(f *testing.F) {
	for _, s := range differentialResponseSeeds {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, raw []byte, head bool) {
		method := "GET"
		if head {
			method = "HEAD"
		}
		ours := ourResponse(raw, method)
		std, _ := stdResponse(raw, method)
		// The connection closes when the engine says so for HTTP/1.0 (it
		// never reuses one) and for a body until close; net/http's Close
		// reflects the header only.
		sameClose := ours.close == std.close || bytes.HasPrefix(raw, []byte("HTTP/1.0")) || ours.framing == "close"
		if ours.ok == std.ok && (!ours.ok || ours.framing == std.framing && ours.rest == std.rest && sameClose) {
			checkReframed(t, raw, ours, std)
			return
		}
		if why := responseAllowed(raw, ours, std); why != "" {
			t.Logf("allowed difference (%s)", why)
			return
		}
		t.Fatalf("response %q to %s\nengine:   %v\nnet/http: %v", raw, method, ours, std)
	})
}

// The seed corpora: the vectors of the conformance suite and the usual
// shapes of messages.
var differentialRequestSeeds = []string{
	"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET / HTTP/1.0\r\n\r\n",
	"GET /a?b=%zz HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET /a%zz HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET http://a/b HTTP/1.1\r\nHost: c\r\n\r\n",
	"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
	"POST /a HTTP/1.1\r\nHost: a\r\nConnection: Content-Length\r\nContent-Length: 39\r\n\r\nGET /slow-evil HTTP/1.1\r\nHost: evil\r\n\r\n",
	"POST /a HTTP/1.1\r\nHost: a\r\nConnection: Transfer-Encoding\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\nGET / HTTP/1.1\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\nT: 1\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\nabc\r\n0\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3 x\r\nabc\r\n0\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nT 1\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: xchunked\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nhi",
	"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nhi",
	"POST / HTTP/1.1\r\nHost: a\r\nContent-Length : 2\r\n\r\nhi",
	"GET / HTTP/1.1\r\nHost: a\r\nX A: 1\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding\x0b: chunked\r\n\r\n",
	"GET /\x01 HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a b/c\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nX: a\rb\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
	"GET / HTTP/1.2\r\nHost: a\r\n\r\n",
	"GET / HTTP/1.1\nHost: a\n\n",
	"POST / HTTP/1.1\r\nHost: a\r\nContent_Length: 5\r\n\r\nhello",
	"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nContent-Length: 02\r\n\r\nhi",
	"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nT: 1\r\n 2\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0000000000000003\r\nabc\r\n0\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n00000000000000000000000000004\r\nabcd\r\n0\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0000000000000004\r\nabcd\r\n000A;n=\"v\";x \t\r\n0123456789\r\n1 \t \r\n!\r\n000;e=1\r\nX: 1\r\n\r\n",
}

var differentialResponseSeeds = []string{
	"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi",
	"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhiINJECTED",
	"HTTP/1.1 204 No Content\r\nContent-Length: 8\r\n\r\nINJECTED",
	"HTTP/1.1 304 Not Modified\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\nhi\r\n0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: xchunked\r\n\r\n0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nX: 1\r\n 2\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length : 2\r\n\r\nhi",
	"HTTP/1.1 200 OK\r\nX: a\rb\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nConnection: CLOSE\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 200 OK\r\n\r\nuntil close",
	"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nhi",
	"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\nframes",
	"HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.0 100\n\nHTTP/0.0 200 0000\n\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 002\r\n\r\nhi",
	strings.Repeat("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx", 2),
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n00004;x=y\r\nabcd\r\nA \r\n0123456789\r\n0\r\nT: 1\r\n\r\n",
}

// TestBareLFInChunkLines: the oracle's allowance covers LF alone ending a
// chunk line, and not LF inside a chunk's data.
func TestBareLFInChunkLines(t *testing.T) {
	const head = "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
	for body, want := range map[string]bool{
		"0\r\n\r\n":                 false,
		"5\r\nab\ncd\r\n0\r\n\r\n":  false, // LF in the data is content
		"0\r\n\n":                   true,  // the empty line ending the trailers
		"0\r\nX: y\n\r\n":           true,  // a trailer line
		"5\nabcde\r\n0\r\n\r\n":     true,  // a size line
		"5\r\nabcde\n0\r\n\r\n":     true,  // the line ending a chunk's data
		"5;x=y\r\nabcde\r\n0\r\n\n": true,
	} {
		if got := hasBareLFInChunkLines([]byte(head + body)); got != want {
			t.Errorf("%q: %v, want %v", body, got, want)
		}
	}
}
