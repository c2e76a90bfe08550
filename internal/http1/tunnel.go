package http1

import (
	"bufio"
	"io"
	"net"
	"time"
)

// tunnel connects client and app byte for byte after a 101 until both sides
// are done; it counts as in flight all along.
func (cc *Conn) tunnel(uc *upConn) {
	defer uc.close()
	cc.c.SetReadDeadline(time.Time{})
	cc.c.SetWriteDeadline(time.Time{})
	uc.c.SetReadDeadline(time.Time{})
	cc.resp = append(cc.resp, '\r', '\n')
	if _, err := cc.c.Write(cc.resp); err != nil {
		return
	}
	cc.resp = cc.resp[:0]
	done := make(chan struct{})
	go func() {
		defer close(done)
		splice(uc.c, cc.br, cc.c)
	}()
	splice(cc.c, uc.br, uc.c)
	<-done
}

// splice copies what br holds and then everything from src to dst, and
// half-closes dst when src ends.
func splice(dst *net.TCPConn, br *bufio.Reader, src *net.TCPConn) {
	defer dst.CloseWrite()
	if n := br.Buffered(); n > 0 {
		b, _ := br.Peek(n)
		if _, err := dst.Write(b); err != nil {
			src.CloseRead()
			return
		}
		br.Discard(n)
	}
	if _, err := io.Copy(dst, src); err != nil {
		src.CloseRead()
	}
}
