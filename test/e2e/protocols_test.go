package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ebb-dev/ebb/internal/sidecarapi"
	"github.com/ebb-dev/ebb/test/cluster"
	"github.com/ebb-dev/ebb/test/e2e/install"
)

// TestGRPCColdAndWarm, gRPC over h2c: five concurrent
// RPCs on one connection to the Service's ClusterIP wake the app from zero
// (held by the activator, then forwarded), each answered SERVING with its
// trailer; once the app's pod serves the Service, an RPC on a new
// connection goes through the sidecar, which counts it.
func TestGRPCColdAndWarm(t *testing.T) {
	ctx := t.Context()
	a := deployAtZero(t, "e2e-grpc", "grpc")
	target := strings.TrimSuffix(strings.TrimPrefix(a.URL, "http://"), "/") + ":80"

	conn, err := grpc.NewClient("passthrough:///"+target, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithAuthority(a.Host))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	begin := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, 5)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = checkHealth(ctx, conn, fmt.Sprintf("cold-%d", i))
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("cold RPC %d: %v", i, err)
		}
	}
	t.Logf("cold: 5 concurrent RPCs on one connection answered in %v", time.Since(begin).Round(time.Millisecond))

	pod := waitServedByPod(t, a)
	before := sidecarStats(t, pod)
	warm, err := grpc.NewClient("passthrough:///"+target, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithAuthority(a.Host))
	if err != nil {
		t.Fatal(err)
	}
	defer warm.Close()
	if err := checkHealth(ctx, warm, "warm"); err != nil {
		t.Errorf("warm RPC: %v", err)
	}
	if after := sidecarStats(t, pod); after.Total != before.Total+1 {
		t.Errorf("the sidecar counted %d requests for one warm RPC (total %d → %d)", after.Total-before.Total, before.Total, after.Total)
	}
}

// TestWebSocketColdAndWarm: a WebSocket to the
// Service's ClusterIP wakes the app from zero and echoes; while it stays
// open the app counts as busy and is not scaled to zero past the cooldown;
// once the pod serves the Service a second WebSocket goes through the
// sidecar (in flight there while open); when both close, the app goes back
// to zero.
func TestWebSocketColdAndWarm(t *testing.T) {
	ctx := t.Context()
	a := deployAtZero(t, "e2e-ws", "ws")
	wsURL := "ws" + strings.TrimPrefix(a.URL, "http") + "ws"
	dial := func() *websocket.Conn {
		t.Helper()
		d := websocket.Dialer{HandshakeTimeout: 60 * time.Second}
		c, resp, err := d.DialContext(ctx, wsURL, http.Header{"Host": {a.Host}})
		if err != nil {
			t.Fatalf("dial %s: %v (response %v)", wsURL, err, resp)
		}
		return c
	}
	begin := time.Now()
	cold := dial()
	defer cold.Close()
	echo(t, cold, "cold")
	t.Logf("cold: WebSocket opened and echoed in %v", time.Since(begin).Round(time.Millisecond))

	// Open, idle, past rateWindow (3 s) + cooldown (5 s) and then some: the
	// open socket is in flight, so KEDA keeps the app.
	hold := 12 * time.Second
	deadline := time.Now().Add(hold)
	for time.Now().Before(deadline) {
		d, err := lc.Client.AppsV1().Deployments(a.Namespace).Get(ctx, a.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if *d.Spec.Replicas == 0 {
			t.Fatalf("scaled to zero %v after the WebSocket opened, while it is open", time.Since(begin).Round(time.Millisecond))
		}
		time.Sleep(500 * time.Millisecond)
	}
	echo(t, cold, "still open")

	pod := waitServedByPod(t, a)
	warm := dial()
	echo(t, warm, "warm")
	if s := sidecarStats(t, pod); s.InFlight < 2 {
		t.Errorf("the sidecar has %d in flight with two WebSockets open through it, want 2", s.InFlight)
	}
	warm.Close()
	cold.Close()
	closed := time.Now()
	if err := lc.WaitReplicas(ctx, a.Namespace, a.Name, 0, 90*time.Second); err != nil {
		t.Fatalf("after the WebSockets closed: %v", err)
	}
	t.Logf("back to zero %v after the WebSockets closed", time.Since(closed).Round(time.Millisecond))
}

func checkHealth(ctx context.Context, conn *grpc.ClientConn, echoValue string) error {
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(ctx, "ebb-echo", echoValue), 60*time.Second)
	defer cancel()
	var trailer metadata.MD
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Trailer(&trailer))
	if err != nil {
		return fmt.Errorf("Health.Check: %w", err)
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("status %v, want SERVING", resp.GetStatus())
	}
	if got := trailer.Get("ebb-echo"); len(got) != 1 || got[0] != echoValue {
		return fmt.Errorf("trailer ebb-echo %q, want [%q]", got, echoValue)
	}
	return nil
}

func echo(t *testing.T, c *websocket.Conn, msg string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if err := c.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
		t.Fatalf("write %q: %v", msg, err)
	}
	_, b, err := c.ReadMessage()
	if err != nil || string(b) != msg {
		t.Fatalf("echo of %q: %q, %v", msg, b, err)
	}
}

// waitServedByPod waits until the app has one ready pod and the activator's
// hand-off slice is gone (kube-proxy sends the Service to the pod's
// sidecar), and returns the pod's IP.
func waitServedByPod(t *testing.T, a *install.AppAtZero) string {
	t.Helper()
	ctx := t.Context()
	var ip string
	err := cluster.WaitFor(ctx, 60*time.Second, "the app's pod to serve its Service", func(ctx context.Context) (bool, error) {
		n, err := ebb.HandOffEndpoints(ctx, lc, a.Namespace, a.Name)
		if err != nil || n > 0 {
			return false, err
		}
		pods, err := ebb.PodsOf(ctx, lc, a.Namespace, a.Name)
		if err != nil || len(pods) != 1 || pods[0].Status.PodIP == "" || pods[0].DeletionTimestamp != nil {
			return false, err
		}
		ip = pods[0].Status.PodIP
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// kube-proxy reprograms within its sync period after the slice is gone.
	time.Sleep(2 * time.Second)
	return ip
}

// sidecarStats reads the sidecar's counters from its admin port.
func sidecarStats(t *testing.T, podIP string) sidecarapi.Snapshot {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://%s:%d%s", podIP, sidecarapi.DefaultAdminPort, sidecarapi.StatsPath))
	if err != nil {
		t.Fatalf("sidecar stats: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("sidecar stats: %v", err)
	}
	s, err := sidecarapi.ParseSnapshot(b)
	if err != nil {
		t.Fatalf("sidecar stats %q: %v", b, err)
	}
	return s
}
