// Package tcptest is the raw TCP server ebb's tests put in front of or
// behind a proxy when net/http would hide what is under test: every byte
// on the wire is the handler's to read and write.
package tcptest

import (
	"net"
	"testing"
)

// Serve listens on 127.0.0.1:0 until t's cleanup closes the listener,
// runs handle in a goroutine of its own for each connection it accepts,
// closes that connection when handle returns, and returns the address.
// Closing the listener does not close connections still being handled.
func Serve(t testing.TB, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
	return ln.Addr().String()
}
