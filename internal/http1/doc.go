// Package proxy is the hand-written HTTP/1.1 reverse-proxy engine shared by
// ebb-sidecar and ebb-activator: it parses each request head once into a
// per-connection buffer (hop-by-hop headers dropped, X-Forwarded-For
// appended, the Host kept), sends it over a pooled keep-alive connection of
// an Upstream, and copies bodies (Content-Length, chunked with trailers, or
// until close) piece by piece as they arrive, request bodies in their own
// goroutine (full duplex). 1xx responses are forwarded; a 101 turns the
// connection into a byte tunnel. HTTP/1.0 requests close the connection
// afterwards. A pooled connection found closed before any byte of a
// response is retried once on a fresh one (GET, HEAD, OPTIONS, TRACE
// without a streamed body, or a head that could not be written). A request
// the engine does not serve itself goes, connection and all, to another
// server: Conn.Serve returns the connection with what was read put back in
// front, for the HTTP/2 preface (h2c with prior knowledge) and for
// Conn.HandOff.
//
// It uses the standard library only. The embedding server is a Handler:
// it picks the Upstream of each request (and counts it), tracks idle
// connections for its drain, and words the 502 answered when an upstream
// fails; malformed heads are refused by the engine itself (400, 431, 501,
// 505, 405 for CONNECT) with a body prefixed by Options.Name.
package http1
