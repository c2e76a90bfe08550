//go:build unix

package http1

import (
	"net"
	"syscall"
)

// peek looks at a connection without blocking and without consuming, and
// whatever its deadlines: readable tells whether bytes are waiting, closed
// whether the peer has closed (EOF) or reset it.
func peek(c *net.TCPConn) (readable, closed bool) {
	rc, err := c.SyscallConn()
	if err != nil {
		return false, true
	}
	err = rc.Control(func(fd uintptr) {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case n > 0:
			readable = true
		case n == 0 && err == nil:
			closed = true
		case err == syscall.EAGAIN || err == syscall.EWOULDBLOCK || err == syscall.EINTR:
		default:
			closed = true
		}
	})
	if err != nil {
		closed = true
	}
	return readable, closed
}

// clean reports whether an idle connection to an app can carry a request:
// still open, and nothing unsolicited waiting on it.
func clean(c *net.TCPConn) bool {
	readable, closed := peek(c)
	return !readable && !closed
}
