package tcptest

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"
)

// TestServe: each connection gets its own handler at once (the second is
// answered while the first is still open), the connection is closed when
// its handler returns, and nothing listens once the test has ended.
func TestServe(t *testing.T) {
	var addr string
	t.Run("serve", func(t *testing.T) {
		addr = Serve(t, func(c net.Conn) {
			line, err := bufio.NewReader(c).ReadString('\n')
			if err != nil {
				return
			}
			io.WriteString(c, "echo "+line)
		})
		first := dial(t, addr)
		second := dial(t, addr)
		for _, c := range []struct {
			conn net.Conn
			say  string
		}{{second, "two\n"}, {first, "one\n"}} {
			io.WriteString(c.conn, c.say)
			got, err := io.ReadAll(c.conn)
			if err != nil {
				t.Fatalf("after %q: %v (the connection was not closed when its handler returned)", c.say, err)
			}
			if string(got) != "echo "+c.say {
				t.Errorf("after %q got %q, want %q and then the end of the connection", c.say, got, "echo "+c.say)
			}
		}
	})
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Errorf("%s still accepts connections after the test that served it ended", addr)
	}
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(5 * time.Second))
	return c
}
