package sidecarapi

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// The bounds of ReadStatsResponse: a sidecar's answer to GET StatsPath is a
// head of about 150 bytes (status line, Content-Type, Cache-Control, Date,
// Content-Length) and a body of at most MaxStatsLine (82) bytes.
const (
	// MaxHead bounds the status line and header section, CRLFs included.
	MaxHead = 1024
	// MaxFields bounds the number of header fields.
	MaxFields = 32
	// MaxBody bounds the body; ReadStatsResponse reads at most len(body) of
	// it.
	MaxBody = 256
	// maxChunkSizeDigits bounds a chunk-size line (net/http allows 16).
	maxChunkSizeDigits = 8
)

// ResponseError is a response ReadStatsResponse refuses: not the strict
// subset of HTTP/1.1 a sidecar answers with (Reason "http"), a status other
// than 200 ("status"), beyond a bound ("too_long"), or of a Content-Type
// other than StatsContentType ("format"). Errors of the connection itself
// (time-outs, resets, a close before the end) are returned as they are,
// wrapped.
type ResponseError struct {
	Reason string
	Detail string
}

// Reasons of a ResponseError; metric label values.
const (
	ReasonHTTP    = "http"
	ReasonStatus  = "status"
	ReasonTooLong = "too_long"
	// ReasonFormat: not a stats line of StatsVersion. ParseSnapshot's
	// ErrFormat is the same refusal, found in the body.
	ReasonFormat = "format"
)

func (e *ResponseError) Error() string { return "stats answer refused (" + e.Reason + "): " + e.Detail }

func refuse(reason, format string, a ...any) error {
	return &ResponseError{Reason: reason, Detail: fmt.Sprintf(format, a...)}
}

// ReadStatsResponse reads one response to GET StatsPath from br and copies
// its body into body, returning the body's length and whether the
// connection may carry another request. It reads no more than MaxHead bytes of head and
// len(body) (at most MaxBody) bytes of body, plus the chunk framing of at
// most len(body) chunks; br's buffer must hold a whole line (512 bytes is
// plenty: a longer line is refused as too_long).
//
// It accepts a strict subset of what net/http's http.ReadResponse accepts
// (FuzzReadStatsResponse checks it against net/http):
//   - status line "HTTP/1.1 200 " or "HTTP/1.0 200 " and a reason of
//     visible characters, spaces and tabs; any other status, 1xx included,
//     is refused;
//   - every line ends in CRLF; a header field is a token, ":", optional
//     whitespace and visible characters; no obs-fold, no empty name, no
//     control character;
//   - exactly one framing: one Content-Length of decimal digits, or one
//     Transfer-Encoding "chunked" (HTTP/1.1 only); both, neither (a body
//     delimited by close), a list or a repetition is refused;
//   - chunked: chunk sizes of hex digits only (no extension, no padding),
//     data followed by CRLF, and no trailer field;
//   - exactly one Content-Type, StatsContentType as the sidecar writes it:
//     another version of the stats line is refused before its body is read
//     (ReasonFormat).
//
// The connection is kept only for an HTTP/1.1 answer with no Connection
// field (or only "keep-alive") and no byte after the response already
// received.
func ReadStatsResponse(br *bufio.Reader, body []byte) (n int, keep bool, err error) {
	if len(body) > MaxBody {
		body = body[:MaxBody]
	}
	head := 0
	line, err := readLine(br, &head)
	if err != nil {
		return 0, false, fmt.Errorf("read status line: %w", err)
	}
	var minor byte
	switch {
	case bytes.HasPrefix(line, []byte("HTTP/1.1 ")):
		minor = '1'
	case bytes.HasPrefix(line, []byte("HTTP/1.0 ")):
		minor = '0'
	default:
		return 0, false, refuse(ReasonHTTP, "status line %q", clip(line))
	}
	rest := line[len("HTTP/1.1 "):]
	if len(rest) < 4 || !isDigit(rest[0]) || !isDigit(rest[1]) || !isDigit(rest[2]) || rest[3] != ' ' || !fieldValue(rest[4:]) {
		return 0, false, refuse(ReasonHTTP, "status line %q", clip(line))
	}
	if string(rest[:3]) != "200" {
		return 0, false, refuse(ReasonStatus, "status %q", rest[:3])
	}
	keep = minor == '1'
	length, chunked, typed := -1, false, false
	for fields := 0; ; fields++ {
		line, err := readLine(br, &head)
		if err != nil {
			return 0, false, fmt.Errorf("read header: %w", err)
		}
		if len(line) == 0 {
			break
		}
		if fields == MaxFields {
			return 0, false, refuse(ReasonTooLong, "more than %d header fields", MaxFields)
		}
		colon := bytes.IndexByte(line, ':')
		if colon < 1 || !token(line[:colon]) {
			return 0, false, refuse(ReasonHTTP, "header line %q", clip(line))
		}
		name, value := line[:colon], trimOWS(line[colon+1:])
		if !fieldValue(value) {
			return 0, false, refuse(ReasonHTTP, "header line %q", clip(line))
		}
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if length >= 0 || len(value) == 0 || len(value) > 19 || !allDigits(value) {
				return 0, false, refuse(ReasonHTTP, "Content-Length %q", clip(value))
			}
			length = 0
			for _, c := range value {
				length = min(length*10+int(c-'0'), 1<<40) // no overflow: anything above MaxBody is refused
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			if chunked || minor != '1' || !bytes.EqualFold(value, []byte("chunked")) {
				return 0, false, refuse(ReasonHTTP, "Transfer-Encoding %q", clip(value))
			}
			chunked = true
		case bytes.EqualFold(name, []byte("Content-Type")):
			if typed || string(value) != StatsContentType {
				return 0, false, refuse(ReasonFormat, "Content-Type %q, want one %q", clip(value), StatsContentType)
			}
			typed = true
		case bytes.EqualFold(name, []byte("Connection")):
			if !bytes.EqualFold(value, []byte("keep-alive")) {
				keep = false
			}
		}
	}
	switch {
	case !typed:
		return 0, false, refuse(ReasonFormat, "no Content-Type, want %q", StatsContentType)
	case chunked && length >= 0:
		return 0, false, refuse(ReasonHTTP, "both Content-Length and Transfer-Encoding")
	case chunked:
		n, err = readChunked(br, body)
	case length < 0:
		return 0, false, refuse(ReasonHTTP, "no Content-Length or Transfer-Encoding (a body delimited by close)")
	case length > len(body):
		return 0, false, refuse(ReasonTooLong, "Content-Length %d above %d", length, len(body))
	default:
		if _, err = io.ReadFull(br, body[:length]); err != nil {
			err = fmt.Errorf("read body: %w", err)
		}
		n = length
	}
	if err != nil {
		return 0, false, err
	}
	return n, keep && br.Buffered() == 0, nil
}

func readChunked(br *bufio.Reader, body []byte) (int, error) {
	n := 0
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return 0, lineErr("read chunk size", err)
		}
		size, ok := 0, len(line) >= 3 && len(line)-2 <= maxChunkSizeDigits && line[len(line)-2] == '\r'
		for _, c := range line[:max(len(line)-2, 0)] {
			v, hex := unhex(c)
			ok = ok && hex
			size = size<<4 | v
		}
		if !ok {
			return 0, refuse(ReasonHTTP, "chunk size line %q", clip(line))
		}
		if size == 0 {
			end, err := br.ReadSlice('\n')
			if err != nil {
				return 0, lineErr("read chunked body end", err)
			}
			if string(end) != "\r\n" {
				return 0, refuse(ReasonHTTP, "trailer section %q (none allowed)", clip(end))
			}
			return n, nil
		}
		if size > len(body)-n {
			return 0, refuse(ReasonTooLong, "chunked body above %d bytes", len(body))
		}
		if _, err := io.ReadFull(br, body[n:n+size]); err != nil {
			return 0, fmt.Errorf("read chunk: %w", err)
		}
		n += size
		var crlf [2]byte
		if _, err := io.ReadFull(br, crlf[:]); err != nil {
			return 0, fmt.Errorf("read chunk end: %w", err)
		}
		if crlf != [2]byte{'\r', '\n'} {
			return 0, refuse(ReasonHTTP, "chunk data not followed by CRLF")
		}
	}
}

// readLine reads one CRLF-ended line, counting it against MaxHead, and
// returns it without the CRLF.
func readLine(br *bufio.Reader, head *int) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	*head += len(line)
	if *head > MaxHead {
		return nil, refuse(ReasonTooLong, "head above %d bytes", MaxHead)
	}
	if err != nil {
		return nil, lineErr("", err)
	}
	if len(line) < 2 || line[len(line)-2] != '\r' {
		return nil, refuse(ReasonHTTP, "line %q does not end in CRLF", clip(line))
	}
	return line[:len(line)-2], nil
}

func lineErr(what string, err error) error {
	if errors.Is(err, bufio.ErrBufferFull) {
		return refuse(ReasonTooLong, "a line longer than the read buffer")
	}
	if what == "" {
		return err
	}
	return fmt.Errorf("%s: %w", what, err)
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func allDigits(b []byte) bool {
	for _, c := range b {
		if !isDigit(c) {
			return false
		}
	}
	return true
}

func unhex(c byte) (int, bool) {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0'), true
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10, true
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10, true
	}
	return 0, false
}

// token reports whether b is an RFC 9110 token.
func token(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 || !tchar[c] {
			return false
		}
	}
	return len(b) > 0
}

var tchar = func() (t [128]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

// fieldValue reports whether b holds only visible characters, spaces and
// tabs (obs-text refused too: a sidecar sends ASCII).
func fieldValue(b []byte) bool {
	for _, c := range b {
		if (c < 0x20 && c != '\t') || c >= 0x7f {
			return false
		}
	}
	return true
}

func trimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

func clip(b []byte) []byte {
	if len(b) > 60 {
		return b[:60]
	}
	return b
}
