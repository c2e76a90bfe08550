package sidecar

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestHeadToDownAppGetsNoBody: a HEAD whose app cannot be reached gets
// the 502 as a head alone, on a connection kept open: its text went out
// after the head, and the next request on the connection (another
// client's, behind a pooling proxy) read it as its response.
func TestHeadToDownAppGetsNoBody(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := ln.Addr().String()
	ln.Close()
	r := startSidecar(t, testOptions(down))
	c, br := dialRaw(t, r.addr)
	io.WriteString(c, "HEAD / HTTP/1.1\r\nHost: a\r\n\r\n")
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodHead})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway || resp.Close {
		t.Fatalf("HEAD got %d (close %v), want 502 on a connection kept open", resp.StatusCode, resp.Close)
	}
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if line, _ := br.ReadString('\n'); !strings.HasPrefix(line, "HTTP/1.1 502 ") {
		t.Errorf("the next response on the connection begins %q, want the next request's 502", line)
	}
}
