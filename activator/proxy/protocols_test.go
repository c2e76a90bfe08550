package proxy

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gorilla/websocket"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
)

var testAppBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "ebb-activator-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testAppBin = filepath.Join(dir, "ebb-test-app")
	if out, err := exec.Command("go", "build", "-o", testAppBin, "github.com/ebb-dev/ebb/test/app").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build the test app: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

var servingAddr = regexp.MustCompile(`ebb-test-app serving addr=(\S+)`)

// realApp runs ebb-test-app (HTTP/1.1 and h2c on one port) and returns its
// address.
func realApp(t *testing.T) string {
	t.Helper()
	cmd := exec.Command(testAppBin, "--listen=127.0.0.1:0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		if m := servingAddr.FindStringSubmatch(sc.Text()); m != nil {
			go func() {
				for sc.Scan() {
				}
			}()
			return m[1]
		}
	}
	t.Fatalf("ebb-test-app did not report its address: %v", sc.Err())
	return ""
}

// protoCase runs check against the activator twice: with the app warm, and
// with the app cold (check starts, the request is held, then the pod turns
// ready).
func protoCase(t *testing.T, check func(t *testing.T, url string) error) {
	for _, cold := range []bool{false, true} {
		t.Run(map[bool]string{false: "warm", true: "cold"}[cold], func(t *testing.T) {
			rt, url, _ := rigProtocols(t, RouterOptions{ColdStartTimeout: 30 * time.Second}, AppConfig{}, true)
			app := realApp(t)
			if !cold {
				rt.SetEndpoints(shopHello, []Endpoint{{Addr: app, Ready: true}})
				if err := check(t, url); err != nil {
					t.Error(err)
				}
				return
			}
			errc := make(chan error, 1)
			go func() { errc <- check(t, url) }()
			waitHeld(t, rt, 1)
			select {
			case err := <-errc:
				t.Fatalf("answered while no pod was ready: %v", err)
			case <-time.After(50 * time.Millisecond):
			}
			rt.SetEndpoints(shopHello, []Endpoint{{Addr: app, Ready: true}})
			select {
			case err := <-errc:
				if err != nil {
					t.Error(err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("no answer after the pod turned ready")
			}
			if rt.Held() != 0 {
				t.Errorf("still held: %d", rt.Held())
			}
		})
	}
}

func TestGRPCThroughActivatorKeepsTrailers(t *testing.T) {
	protoCase(t, func(t *testing.T, url string) error {
		conn, err := grpc.NewClient("passthrough:///"+strings.TrimPrefix(url, "http://"),
			grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithAuthority("hello.test"))
		if err != nil {
			return err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(t.Context(), "ebb-echo", "v42"), 20*time.Second)
		defer cancel()
		var trailer metadata.MD
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "ebb.test"}, grpc.Trailer(&trailer))
		if err != nil {
			return fmt.Errorf("Health.Check: %w", err)
		}
		if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			return fmt.Errorf("status %v, want SERVING", resp.GetStatus())
		}
		if d := cmp.Diff([]string{"v42"}, trailer.Get("ebb-echo")); d != "" {
			return fmt.Errorf("trailer ebb-echo (-want +got):\n%s", d)
		}
		return nil
	})
}

func TestWebSocketThroughActivator(t *testing.T) {
	protoCase(t, func(t *testing.T, url string) error {
		d := websocket.Dialer{HandshakeTimeout: 20 * time.Second}
		c, resp, err := d.DialContext(t.Context(), "ws"+strings.TrimPrefix(url, "http")+"/ws", http.Header{"Host": {"hello.test"}})
		if err != nil {
			return fmt.Errorf("dial: %w (response %v)", err, resp)
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		var got []string
		for _, m := range []string{"one", "two", "three"} {
			if err := c.WriteMessage(websocket.TextMessage, []byte(m)); err != nil {
				return err
			}
			_, b, err := c.ReadMessage()
			if err != nil {
				return err
			}
			got = append(got, string(b))
		}
		if d := cmp.Diff([]string{"one", "two", "three"}, got); d != "" {
			return fmt.Errorf("echoes (-want +got):\n%s", d)
		}
		return nil
	})
}

// SSE events reach the client as the app flushes them, not at the end.
func TestSSEThroughActivatorIsFlushed(t *testing.T) {
	protoCase(t, func(t *testing.T, url string) error {
		const interval = 300 * time.Millisecond
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, fmt.Sprintf("%s/sse?n=3&interval=%s", url, interval), nil)
		req.Host = "hello.test"
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
			return fmt.Errorf("Content-Type %q", ct)
		}
		sc := bufio.NewScanner(resp.Body)
		var events []string
		var at []time.Time
		for sc.Scan() {
			if line := sc.Text(); strings.HasPrefix(line, "data: ") {
				events = append(events, strings.TrimPrefix(line, "data: "))
				at = append(at, time.Now())
			}
		}
		if d := cmp.Diff([]string{"event 0", "event 1", "event 2"}, events); d != "" {
			return fmt.Errorf("events (-want +got):\n%s", d)
		}
		if gap := at[2].Sub(at[0]); gap < 3*interval/2 {
			return fmt.Errorf("events 0 and 2 arrived %s apart, want about %s: not flushed as they came", gap, 2*interval)
		}
		return nil
	})
}
