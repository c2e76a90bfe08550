package http1

import (
	"bytes"
	"errors"
	"strconv"
)

// Body framings of an HTTP/1.x message.
const (
	bodyNone    uint8 = iota // no body
	bodyLength               // Content-Length bytes
	bodyChunked              // chunked, re-framed from what was parsed (trailers as received, once checked)
	bodyClose                // until the sender closes (responses only)
)

var errChunked = errors.New("malformed chunked encoding")

// Limits of the chunked scanner: a chunk-size line (with extensions, as
// net/http's limit) and the whole trailer section.
const (
	maxChunkLine    = 4 << 10
	maxTrailerBytes = 64 << 10
	// maxChunkDigits: 15 significant hex digits keep a chunk size within
	// int64.
	maxChunkDigits = 15
	// maxSizeDigits: a chunk size has at most 16 hex digits, leading zeros
	// included (net/http's bound).
	maxSizeDigits = 16
)

// States of the chunked scanner (RFC 9112 section 7.1). Every line ends
// with CRLF: a bare LF or a CR anywhere else is an error.
const (
	csSize         uint8 = iota // hex digits of a chunk size
	csSizeWS                    // white space after the size, before CRLF
	csExt                       // a chunk extension, up to CR
	csSizeLF                    // LF ending a size line
	csData                      // chunk data
	csDataCR                    // CR after chunk data
	csDataLF                    // LF after chunk data
	csTrailerStart              // start of a trailer line or of the final CRLF
	csTrailerName               // field name of a trailer line
	csTrailerValue              // field value of a trailer line, up to CR
	csTrailerLF                 // LF ending a trailer line
	csFinalLF                   // LF of the final CRLF
)

// framing tracks how much of one message body is still to come. The chunked
// scanner is a byte-level state machine so that any slice of input can be
// checked and consumed without buffering; it accepts exactly RFC 9112's
// chunked grammar (white space after the size and at most 16 size digits,
// as net/http has them), and reframe sends on what it parsed, so what goes
// on is framed the same for every parser after it.
type framing struct {
	kind uint8
	// rechunk: a body until close, sent on chunked (responses to HTTP/1.1
	// clients).
	rechunk bool
	state   uint8
	digits  uint8
	remain  int64 // bytes of a Content-Length body or of the current chunk
	size    int64 // chunk size being parsed
	line    int   // bytes of the current size line, or of the trailer section
}

func (f *framing) reset(kind uint8, length int64) {
	*f = framing{kind: kind, remain: length}
	if kind == bodyLength && length == 0 {
		f.kind = bodyNone
	}
}

// done reports whether the whole body has been consumed.
func (f *framing) done() bool { return f.kind == bodyNone }

// consume returns how many leading bytes of b belong to the body, marking
// the body done when its end is among them.
func (f *framing) consume(b []byte) (int, error) {
	switch f.kind {
	case bodyNone:
		return 0, nil
	case bodyLength:
		n := len(b)
		if int64(n) >= f.remain {
			n = int(f.remain)
			f.kind = bodyNone
		}
		f.remain -= int64(n)
		return n, nil
	case bodyClose:
		return len(b), nil
	}
	return f.chunked(b, nil)
}

// reframe consumes a chunked body like consume and appends to out what to
// send on for the bytes consumed: the chunks framed from what was parsed
// (each size in minimal lower-case hex with CRLF, no white space, no
// extensions: RFC 9112 section 7.1.1 has recipients ignore them), the data
// and the trailer section as received (every trailer line was checked).
func (f *framing) reframe(b, out []byte) (int, []byte, error) {
	n, err := f.chunked(b, &out)
	return n, out, err
}

// chunked scans a chunked body; with out, it appends the body re-framed.
func (f *framing) chunked(b []byte, out *[]byte) (int, error) {
	i := 0
	for i < len(b) {
		c := b[i]
		switch f.state {
		case csSize:
			if v, ok := unhex(c); ok {
				// At most maxSizeDigits digits, leading zeros included (as
				// net/http has it); the value stays below
				// 16^maxChunkDigits.
				if f.size >= 1<<(4*(maxChunkDigits-1)) || f.digits >= maxSizeDigits {
					return i, errChunked
				}
				f.digits++
				f.size = f.size<<4 | int64(v)
				f.line++
				i++
				continue
			}
			if f.digits == 0 {
				return i, errChunked
			}
			switch c {
			case ';':
				f.state = csExt
			case ' ', '\t':
				f.state = csSizeWS
			case '\r':
				f.state = csSizeLF
			default: // a bare LF included
				return i, errChunked
			}
			f.line++
			i++
		case csSizeWS:
			switch c {
			case ' ', '\t':
				if f.line >= maxChunkLine {
					return i, errChunked
				}
			case '\r':
				f.state = csSizeLF
			default:
				return i, errChunked
			}
			f.line++
			i++
		case csExt:
			// Extensions are checked and dropped: any byte of a field
			// value but CR, which must end the line.
			j := i
			for j < len(b) && b[j] != '\r' && valueChars[b[j]] {
				j++
			}
			f.line += j - i
			if f.line >= maxChunkLine {
				return j, errChunked
			}
			if j < len(b) {
				if b[j] != '\r' {
					return j, errChunked
				}
				f.state = csSizeLF
				j++
			}
			i = j
		case csSizeLF:
			if c != '\n' {
				return i, errChunked
			}
			i++
			if out != nil {
				*out = strconv.AppendInt(*out, f.size, 16)
				*out = append(*out, '\r', '\n')
			}
			f.endSizeLine()
		case csData:
			k := len(b) - i
			if int64(k) >= f.remain {
				k = int(f.remain)
				f.state = csDataCR
			}
			f.remain -= int64(k)
			if out != nil {
				*out = append(*out, b[i:i+k]...)
			}
			i += k
		case csDataCR:
			if c != '\r' {
				return i, errChunked
			}
			f.state = csDataLF
			i++
		case csDataLF:
			if c != '\n' {
				return i, errChunked
			}
			f.state = csSize
			i++
			if out != nil {
				*out = append(*out, '\r', '\n')
			}
		case csTrailerStart, csTrailerName, csTrailerValue, csTrailerLF, csFinalLF:
			// The trailer section goes on as received: its lines are
			// checked byte by byte below.
			j, err := f.trailer(b, i)
			if out != nil {
				*out = append(*out, b[i:j]...)
			}
			if err != nil || f.kind == bodyNone {
				return j, err
			}
			i = j
		}
		if f.line > maxTrailerBytes {
			return i, errChunked
		}
	}
	return i, nil
}

// trailer scans the trailer section (and the final CRLF) from b[i:]; it
// returns where it stopped: the end of b, the end of the body (f.kind is
// then bodyNone) or the offending byte.
func (f *framing) trailer(b []byte, i int) (int, error) {
	for i < len(b) {
		c := b[i]
		switch f.state {
		case csTrailerStart:
			switch {
			case c == '\r':
				f.state = csFinalLF
			case tokenChars[c]:
				f.state = csTrailerName
			default: // obs-fold, a bare LF, a bad name
				return i, errChunked
			}
			f.line++
			i++
		case csTrailerName:
			switch {
			case c == ':':
				f.state = csTrailerValue
			case !tokenChars[c]:
				return i, errChunked
			}
			f.line++
			i++
		case csTrailerValue:
			j := bytes.IndexByte(b[i:], '\r')
			if j < 0 {
				j = len(b) - i
			}
			if !all(b[i:i+j], &valueChars) {
				return i, errChunked
			}
			f.line += j
			i += j
			if i < len(b) {
				f.state = csTrailerLF
				f.line++
				i++
			}
		case csTrailerLF:
			if c != '\n' {
				return i, errChunked
			}
			f.state = csTrailerStart
			f.line++
			i++
		case csFinalLF:
			if c != '\n' {
				return i, errChunked
			}
			f.kind = bodyNone
			return i + 1, nil
		}
		if f.line > maxTrailerBytes {
			return i, errChunked
		}
	}
	return i, nil
}

func (f *framing) endSizeLine() {
	f.line = 0
	f.digits = 0
	if f.size == 0 {
		f.state = csTrailerStart
		return
	}
	f.remain = f.size
	f.size = 0
	f.state = csData
}
