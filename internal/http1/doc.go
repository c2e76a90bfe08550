// Package http1 is the HTTP/1.1 reverse-proxy engine ebb-sidecar and
// ebb-activator put in front of every request, and the Server that runs it:
// the accept loop, panic recovery, connection tracking and drain, with the
// component supplying only a Handler (which Upstream serves a request, and
// the words of a 502/504).
//
// The engine is strict (RFC 9112, RFC 9110) and frames by construction. A
// request or response head is parsed once and the head sent on is built from
// what was parsed: field names must be tokens, values free of controls, no
// obsolete line folding; Content-Length and Transfer-Encoding are never
// copied but re-emitted from the framing the engine applies, so whatever a
// Connection header names, the next hop delimits the body as the engine did.
// Chunked bodies pass through a byte-level scanner that accepts exactly the
// chunked grammar (CRLF line ends, at most 16 size digits, extension and
// trailer syntax) and go on re-framed from what it parsed: sizes in minimal
// hex, extensions dropped, data and trailers as received. Bad requests get
// 400/431/501/505 (405 for CONNECT); a bad response from the app gets the
// client a 502 and the app's connection closed. The engine's own answers
// (those, Answer, a failed upstream's 502/504) carry no body to a HEAD,
// and neither body nor Content-Length with a 1xx, 204 or 304: on a
// connection kept open, such bytes would be read as the next response.
//
// Upstream is a keep-alive pool per app address. A connection goes back only
// after a response consumed exactly, and is taken again only if nothing
// arrived on it meanwhile: bytes an app sends unasked cost it its connection
// and never reach another client. A request waiting on the app checks every
// 100 ms that its client is still there and ends when it is not: a FIN or a
// reset counts, read from the socket's TCP state, so bytes not read yet (a
// pipelined request, a body the app does not take) do not hide it;
// Options.ResponseHeaderTimeout answers 504. Bodies are copied piece by
// piece as they arrive (request bodies in their own goroutine, full duplex);
// a response body delimited by the app's close goes to an HTTP/1.1 client
// chunked, so that an app that fails midway leaves it without the last chunk
// and the cut shows (HTTP/1.0 clients get it until close); 1xx responses are
// forwarded (not to HTTP/1.0 clients; at most five, all within the one
// response-header timeout), and a 101 turns the connection into a byte
// tunnel: a side's FIN is passed on, and then the other side's silence
// beyond Options.HalfCloseTimeout, a reset, a failed write or
// Options.TunnelIdleTimeout closes it whole. Connections that start with the
// HTTP/2 preface, and requests a Handler gives away (Conn.HandOff), go to
// another server with what was read put back in front. A request a Handler
// holds (Conn.Park) stays parsed in its Conn, with no goroutine and nothing
// read, until its owner resumes it (Conn.Resume: sent like any other, or
// answered with Conn.Answer) or drops it.
//
// The differential fuzz targets hold the parsers to net/http's except for
// the deliberate differences listed in differential_test.go; the raw-TCP
// conformance suite pins the bytes each party sees.
package http1
