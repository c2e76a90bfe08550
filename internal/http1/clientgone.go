package http1

// ClientGone reports whether the client closed or reset its connection,
// from the socket alone, reading nothing: for a handler that makes a
// request wait before RoundTrip (a queue).
func (cc *Conn) ClientGone() bool { return cc.clientGone() }
