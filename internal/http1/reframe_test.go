package http1

import "testing"

// TestReframe: a chunked body as the engine sends it on, whole and cut at
// every position (the output must not depend on how the bytes arrive):
// sizes in minimal lower-case hex, no white space or extensions, data and
// trailers as received.
func TestReframe(t *testing.T) {
	tests := []struct{ in, want string }{
		{"5\r\nhello\r\n0\r\n\r\n", "5\r\nhello\r\n0\r\n\r\n"},
		{"0005;a=1;b=\"x y\"\r\nhello\r\n000;end\r\n\r\n", "5\r\nhello\r\n0\r\n\r\n"},
		{"A \t\r\n0123456789\r\n1F\r\n" + string(make([]byte, 31)) + "\r\n0\r\nX-T: 1\r\nY: a b\r\n\r\n",
			"a\r\n0123456789\r\n1f\r\n" + string(make([]byte, 31)) + "\r\n0\r\nX-T: 1\r\nY: a b\r\n\r\n"},
	}
	for _, tt := range tests {
		for cut := 0; cut <= len(tt.in); cut++ {
			var f framing
			f.reset(bodyChunked, 0)
			n1, out, err := f.reframe([]byte(tt.in[:cut]), nil)
			n := n1
			if err == nil && !f.done() {
				var n2 int
				n2, out, err = f.reframe([]byte(tt.in[n1:]), out)
				n += n2
			}
			if err != nil || n != len(tt.in) || !f.done() || string(out) != tt.want {
				t.Errorf("%q (cut %d): %q, n=%d done=%v err=%v; want %q", tt.in, cut, out, n, f.done(), err, tt.want)
			}
		}
	}
}
