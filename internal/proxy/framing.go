package proxy

import (
	"bytes"
	"errors"
)

// Body framings of an HTTP/1.x message.
const (
	bodyNone    uint8 = iota // no body
	bodyLength               // Content-Length bytes
	bodyChunked              // chunked, passed through verbatim (trailers included)
	bodyClose                // until the sender closes (responses only)
)

var errChunked = errors.New("malformed chunked encoding")

// Limits of the chunked scanner: a chunk-size line (with extensions) and the
// whole trailer section.
const (
	maxChunkLine    = 4 << 10
	maxTrailerBytes = 64 << 10
)

// States of the chunked scanner.
const (
	csSize         uint8 = iota // hex digits of a chunk size
	csExt                       // rest of the size line, up to LF
	csData                      // chunk data
	csDataCR                    // CR (or bare LF) after chunk data
	csDataLF                    // LF after chunk data
	csTrailerStart              // start of a trailer line or of the final CRLF
	csTrailer                   // inside a trailer line
	csFinalLF                   // LF of the final CRLF
)

// framing tracks how much of one message body is still to come. The chunked
// scanner is a byte-level state machine so that any slice of input can be
// consumed without buffering.
type framing struct {
	kind   uint8
	state  uint8
	digits uint8
	remain int64 // bytes of a Content-Length body or of the current chunk
	size   int64 // chunk size being parsed
	line   int   // bytes of the current size line, or of the trailer section
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
	return f.chunked(b)
}

func (f *framing) chunked(b []byte) (int, error) {
	i := 0
	for i < len(b) {
		switch f.state {
		case csSize:
			c := b[i]
			var v byte
			switch {
			case '0' <= c && c <= '9':
				v = c - '0'
			case 'a' <= c && c <= 'f':
				v = c - 'a' + 10
			case 'A' <= c && c <= 'F':
				v = c - 'A' + 10
			case c == ';' || c == ' ' || c == '\t' || c == '\r':
				if f.digits == 0 {
					return i, errChunked
				}
				f.state = csExt
				i++
				continue
			case c == '\n':
				if f.digits == 0 {
					return i, errChunked
				}
				i++
				f.endSizeLine()
				continue
			default:
				return i, errChunked
			}
			if f.digits >= 15 {
				return i, errChunked
			}
			f.digits++
			f.size = f.size<<4 | int64(v)
			i++
		case csExt:
			j := bytes.IndexByte(b[i:], '\n')
			if j < 0 {
				f.line += len(b) - i
				if f.line > maxChunkLine {
					return i, errChunked
				}
				i = len(b)
				continue
			}
			i += j + 1
			f.endSizeLine()
		case csData:
			k := len(b) - i
			if int64(k) >= f.remain {
				k = int(f.remain)
				f.state = csDataCR
			}
			f.remain -= int64(k)
			i += k
		case csDataCR:
			switch b[i] {
			case '\r':
				f.state = csDataLF
			case '\n':
				f.state = csSize
			default:
				return i, errChunked
			}
			i++
		case csDataLF:
			if b[i] != '\n' {
				return i, errChunked
			}
			f.state = csSize
			i++
		case csTrailerStart:
			switch b[i] {
			case '\r':
				f.state = csFinalLF
				i++
			case '\n':
				f.kind = bodyNone
				return i + 1, nil
			default:
				f.state = csTrailer
			}
		case csTrailer:
			j := bytes.IndexByte(b[i:], '\n')
			if j < 0 {
				f.line += len(b) - i
				i = len(b)
			} else {
				f.line += j + 1
				i += j + 1
				f.state = csTrailerStart
			}
			if f.line > maxTrailerBytes {
				return i, errChunked
			}
		case csFinalLF:
			if b[i] != '\n' {
				return i, errChunked
			}
			f.kind = bodyNone
			return i + 1, nil
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
