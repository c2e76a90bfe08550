//go:build !unix

package http1

import "net"

// clean cannot tell on this platform; the request is retried once if the
// app had closed the connection.
func clean(*net.TCPConn) bool { return true }

// clientGone cannot tell on this platform; the response-header timeout
// still bounds the wait.
func clientGone(*net.TCPConn) bool { return false }
