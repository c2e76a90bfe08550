//go:build unix && !linux

package http1

import "net"

// clientGone reports whether a client has closed or reset its connection.
// A peek sees the close only once every byte the client sent was read:
// bytes still in the socket (a pipelined request beyond the engine's
// buffer) hide it until then.
func clientGone(c *net.TCPConn) bool {
	readable, closed := peek(c)
	return closed && !readable
}
