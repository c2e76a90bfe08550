package http1

import "time"

// Fixed is a response whose bytes its owner builds once (a static answer,
// staticanswer.Rule): AppendResponse appends the status line, the header
// fields with the framing, "Connection: close" unless keepAlive, the blank
// line, and the body unless head (the answer to a HEAD request).
type Fixed interface {
	AppendResponse(b []byte, head, keepAlive bool) []byte
}

// AnswerFixed answers the current request with a, of status code status,
// instead of forwarding it. It decides the connection as Answer does (the
// same report, the same gentle close) and tells a whether the connection
// stays open and whether the request is a HEAD.
func (cc *Conn) AnswerFixed(a Fixed, status int) bool {
	rq := &cc.req.rq
	keep := !rq.closeAfter && !cc.draining() && cc.discardBuffered(rq)
	cc.req.status = status
	b := a.AppendResponse(cc.resp[:0], rq.isHead, keep)
	cc.c.SetWriteDeadline(time.Now().Add(cc.o.HeaderTimeout))
	cc.wdl = time.Time{}
	cc.c.Write(b)
	cc.resp = b[:0]
	if !keep {
		cc.closeGently()
	}
	return keep
}

// ClientGone reports whether the client closed or reset its connection,
// from the socket alone, reading nothing: for a handler that makes a
// request wait before RoundTrip (a queue).
func (cc *Conn) ClientGone() bool { return cc.clientGone() }
