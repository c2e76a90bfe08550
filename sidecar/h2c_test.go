package sidecar

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/ebb-dev/ebb/internal/testwait"
)

const h2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// closedBySidecar reads (and discards) what the sidecar sends on conn until
// it closes the connection; it returns how long after start that was, or
// fails t if the connection is still open after wait.
func closedBySidecar(t *testing.T, conn net.Conn, start time.Time, wait time.Duration) time.Duration {
	t.Helper()
	conn.SetReadDeadline(start.Add(wait))
	_, err := io.Copy(io.Discard, conn)
	took := time.Since(start)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the connection is still open %v after its first byte", took.Round(time.Millisecond))
	}
	if err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("reading until the close: %v", err)
	}
	return took
}

// TestH2CHalfPrefaceIsCutAtHeaderTimeout: "PRI * HTTP/2.0\r\n" (the 16
// bytes the HTTP/1.1 engine reads before it hands the connection to the h2c
// server) and nothing else gets no more time than any request head: the
// connection closes at the header timeout counted from its first byte. (It
// stayed open for ever: the hand-off cleared the deadlines and the h2c
// server had no header timeout.)
func TestH2CHalfPrefaceIsCutAtHeaderTimeout(t *testing.T) {
	app := startTestApp(t)
	o := testOptions(app.addr)
	o.HeaderTimeout = 500 * time.Millisecond
	r := startSidecar(t, o)
	for _, sent := range []string{
		"PRI * HTTP/2.0\r\n",         // the request line alone
		"PRI * HTTP/2.0\r\n\r\nSM\r", // all but the preface's last 2 bytes
	} {
		conn, err := net.Dial("tcp", r.addr)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		io.WriteString(conn, sent)
		took := closedBySidecar(t, conn, start, 5*time.Second)
		conn.Close()
		if took < o.HeaderTimeout-50*time.Millisecond || took > o.HeaderTimeout+900*time.Millisecond {
			t.Errorf("%q: closed after %v, want about the header timeout %v", sent, took.Round(time.Millisecond), o.HeaderTimeout)
		}
	}
}

// TestH2CPrefaceWithoutSettingsIsCutAtHeaderTimeout: the client preface
// whole, then no SETTINGS frame, or only part of one: the head's deadline
// holds until the first frame is read whole (net/http's own wait for it is
// a fixed 2 s, whatever the header timeout: the bound below stays under it).
func TestH2CPrefaceWithoutSettingsIsCutAtHeaderTimeout(t *testing.T) {
	app := startTestApp(t)
	o := testOptions(app.addr)
	o.HeaderTimeout = 500 * time.Millisecond
	r := startSidecar(t, o)
	for _, sent := range []string{
		h2Preface,
		h2Preface + "\x00\x00\x06\x04\x00\x00\x00\x00\x00" + "\x00\x03", // SETTINGS of 6 bytes, 2 sent
		h2Preface + "\x00\x00", // part of a frame header
	} {
		conn, err := net.Dial("tcp", r.addr)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		io.WriteString(conn, sent)
		took := closedBySidecar(t, conn, start, 5*time.Second)
		conn.Close()
		if took < o.HeaderTimeout-50*time.Millisecond || took > o.HeaderTimeout+900*time.Millisecond {
			t.Errorf("%q: closed after %v, want about the header timeout %v", sent, took.Round(time.Millisecond), o.HeaderTimeout)
		}
	}
}

// h2cHandshake opens an h2c connection to addr with the preface and a
// SETTINGS frame (two settings: the payload counts in the first frame the
// header timeout bounds), and returns a framer on it.
func h2cHandshake(t *testing.T, addr string) (net.Conn, *http2.Framer) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	io.WriteString(conn, h2Preface)
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(http2.Setting{ID: http2.SettingEnablePush, Val: 0}, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	return conn, fr
}

// TestH2CSilentConnectionIsClosedWhenIdle: a valid h2c connection that
// opens no stream is sent a GOAWAY and closed after the idle timeout, and
// the header timeout no longer applies once its SETTINGS came.
func TestH2CSilentConnectionIsClosedWhenIdle(t *testing.T) {
	app := startTestApp(t)
	o := testOptions(app.addr)
	o.HeaderTimeout = 300 * time.Millisecond
	o.IdleTimeout = 900 * time.Millisecond
	r := startSidecar(t, o)
	start := time.Now()
	conn, fr := h2cHandshake(t, r.addr)
	var goAway time.Duration
	conn.SetReadDeadline(start.Add(5 * time.Second))
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			if goAway == 0 {
				t.Fatalf("no GOAWAY before %v after %v", err, time.Since(start).Round(time.Millisecond))
			}
			break
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.GoAwayFrame:
			goAway = time.Since(start)
		}
	}
	closed := time.Since(start)
	if goAway < o.IdleTimeout-50*time.Millisecond || goAway > o.IdleTimeout+500*time.Millisecond {
		t.Errorf("GOAWAY after %v, want about the idle timeout %v", goAway.Round(time.Millisecond), o.IdleTimeout)
	}
	// net/http closes a second after its GOAWAY when no stream is open.
	if closed > goAway+1500*time.Millisecond {
		t.Errorf("closed %v after the GOAWAY", (closed - goAway).Round(time.Millisecond))
	}
}

// TestH2CVanishedClientIsDetected: a client that opened a stream (counted
// while the app holds it) and then answers nothing, not even a PING, is
// cut after the idle timeout and the ping timeout, and its request is no
// longer counted; before, the stream and the count stayed as long as the
// app held the request.
func TestH2CVanishedClientIsDetected(t *testing.T) {
	app := startTestApp(t)
	o := testOptions(app.addr)
	o.HeaderTimeout = 400 * time.Millisecond
	o.IdleTimeout = 400 * time.Millisecond
	r := startSidecar(t, o)
	conn, fr := h2cHandshake(t, r.addr)
	writeHeaders(t, fr, 1, true, ":method", "GET", ":scheme", "http", ":authority", "a", ":path", "/block")
	<-app.started
	if got := readStats(t, r).InFlight; got != 1 {
		t.Fatalf("in flight = %d while the app holds the request, want 1", got)
	}
	start := time.Now()
	// Read nothing: the client is gone (its kernel would still ACK, so the
	// sidecar's writes succeed; only PING shows it).
	testwait.For(t, 5*time.Second, "the stream to be cut", func() bool { return readStats(t, r).InFlight == 0 })
	if took := time.Since(start); took > o.IdleTimeout+o.HeaderTimeout+time.Second {
		t.Errorf("cut after %v, want about idle (%v) + ping timeout (%v)", took.Round(time.Millisecond), o.IdleTimeout, o.HeaderTimeout)
	}
	conn.Close()
}

// writeHeaders sends a HEADERS frame of the given fields on stream id.
func writeHeaders(t testing.TB, fr *http2.Framer, id uint32, end bool, kv ...string) {
	t.Helper()
	var buf bytes.Buffer
	enc := newHPACK(&buf)
	for i := 0; i+1 < len(kv); i += 2 {
		enc(kv[i], kv[i+1])
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: buf.Bytes(), EndStream: end, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
}

// newHPACK returns a function that encodes one header field into w.
func newHPACK(w io.Writer) func(name, value string) {
	e := hpack.NewEncoder(w)
	return func(name, value string) { e.WriteField(hpack.HeaderField{Name: name, Value: value}) }
}

// rssKB is the process's resident set size in kB, from /proc.
func rssKB(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip("no /proc/self/status")
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return n
		}
	}
	t.Skip("no VmRSS")
	return 0
}

// TestH2CPrefaceFloodIsBounded: 2,000 connections that send only "PRI *
// HTTP/2.0\r\n" are all closed by the sidecar within its header timeout,
// and what they held (goroutines, memory) is given back. (Before: none was
// ever closed; 5,000 took the sidecar from 14 to 70 MB.)
func TestH2CPrefaceFloodIsBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("2,000 connections")
	}
	app := startTestApp(t)
	o := testOptions(app.addr)
	o.HeaderTimeout = time.Second
	r := startSidecar(t, o)
	runtime.GC()
	goroutines, rss0 := runtime.NumGoroutine(), rssKB(t)
	const n = 2000
	conns := make([]net.Conn, 0, n)
	start := time.Now()
	for range n {
		c, err := net.Dial("tcp", r.addr)
		if err != nil {
			t.Fatalf("dial %d: %v", len(conns), err)
		}
		io.WriteString(c, "PRI * HTTP/2.0\r\n")
		conns = append(conns, c)
	}
	opened := time.Since(start)
	time.Sleep(200 * time.Millisecond)
	rssPeak := rssKB(t)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var open int
	var last time.Duration
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			c.SetReadDeadline(start.Add(opened + o.HeaderTimeout + 3*time.Second))
			_, err := io.Copy(io.Discard, c)
			mu.Lock()
			defer mu.Unlock()
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				open++
			}
			last = max(last, time.Since(start))
		}()
	}
	wg.Wait()
	if open > 0 {
		t.Fatalf("%d of %d connections still open %v after the first (header timeout %v)", open, n, last.Round(time.Millisecond), o.HeaderTimeout)
	}
	testwait.For(t, 5*time.Second, "the sidecar's goroutines to end", func() bool { return runtime.NumGoroutine() <= goroutines+5 })
	runtime.GC()
	t.Logf("%d half prefaces: opened in %v, all closed %v after the first; RSS of the test process (client and sidecar) %d kB before, %d kB with all open, %d kB after",
		n, opened.Round(time.Millisecond), last.Round(time.Millisecond), rss0, rssPeak, rssKB(t))
}
