package http1

import "testing"

// TestDelAndAddHeader: DelHeader removes every line of a name, in any
// case, and nothing else; AddHeader adds a line before the head's end and
// refuses a framing name, a name that is not a token and a value with a
// control character, changing nothing. The app gets exactly that head.
func TestDelAndAddHeader(t *testing.T) {
	app := startScriptApp(t, echoPath)
	addr, h := startParkingEngine(t, app.addr)
	cl := dial(t, addr)
	cl.send("GET /x HTTP/1.1\r\nHost: a\r\nEbb-Hop: 1\r\nX-Keep: 1\r\nebb-hop: 2\r\nEbb-Hops: 3\r\n\r\n")
	outcomes := make(chan []string, 1)
	go h.next(t).Resume(func(c *Conn, rq *Request) bool {
		var refused []string
		if !c.DelHeader("ebb-hop") {
			refused = append(refused, "DelHeader of a present header")
		}
		if c.DelHeader("ebb-hop") {
			refused = append(refused, "DelHeader of a removed header")
		}
		for _, f := range [][2]string{{"Content-Length", "5"}, {"transfer-encoding", "chunked"}, {"Host", "b"}, {"X-A\r\nX-B", "1"}, {"X-A", "1\r\nX-B: 2"}, {"X-A", "1\n"}} {
			if c.AddHeader(f[0], f[1]) {
				refused = append(refused, "AddHeader "+f[0])
			}
		}
		if !c.AddHeader("Ebb-Hop", "1") {
			refused = append(refused, "AddHeader Ebb-Hop")
		}
		outcomes <- refused
		return c.RoundTrip(h.up, rq)
	})
	cl.response("GET")
	if refused := <-outcomes; len(refused) > 0 {
		t.Errorf("wrong outcomes: %q", refused)
	}
	got := app.received()
	if len(got) != 1 {
		t.Fatalf("the app saw %d connections", len(got))
	}
	wantEq(t, "the app received", "GET /x HTTP/1.1\r\nHost: a\r\nX-Keep: 1\r\nEbb-Hops: 3\r\nX-Forwarded-For: 127.0.0.1\r\nEbb-Hop: 1\r\n\r\n", got[0])
}
