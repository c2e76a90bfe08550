//go:build linux

package http1

import (
	"net"
	"syscall"
	"unsafe"
)

// tcpEstablished is TCP_ESTABLISHED, the first byte of struct tcp_info.
const tcpEstablished = 1

// clientGone reports whether a client has closed (FIN) or reset its
// connection, from the socket's TCP state: CLOSE_WAIT once its FIN came,
// CLOSE once it reset. Unlike a peek, this sees the close behind bytes not
// read yet (a pipelined request, a request body the app does not take), and
// it neither reads nor blocks, so it may run while another goroutine reads
// the connection. A client that only half-closed counts as gone, as with
// net/http and nginx: it cannot be told from one that closed.
func clientGone(c *net.TCPConn) bool {
	rc, err := c.SyscallConn()
	if err != nil {
		return true
	}
	gone := true
	err = rc.Control(func(fd uintptr) {
		var info [8]byte // tcpi_state comes first
		n := uint32(len(info))
		_, _, errno := syscall.Syscall6(syscall.SYS_GETSOCKOPT, fd, syscall.IPPROTO_TCP, syscall.TCP_INFO,
			uintptr(unsafe.Pointer(&info[0])), uintptr(unsafe.Pointer(&n)), 0)
		gone = errno != 0 || n == 0 || info[0] != tcpEstablished
	})
	return gone || err != nil
}
