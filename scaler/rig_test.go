package scaler

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/ebb-dev/ebb/internal/holdpush"
	"github.com/ebb-dev/ebb/internal/sidecarapi"
	"github.com/ebb-dev/ebb/internal/testwait"
)

// sidecar is a simulated ebb sidecar: a real HTTP server serving /stats.
type sidecar struct {
	srv  *httptest.Server
	mu   sync.Mutex
	snap sidecarapi.Snapshot
}

func newSidecar(t *testing.T, inFlight int64, total, boot uint64) *sidecar {
	sc := &sidecar{snap: sidecarapi.Snapshot{InFlight: inFlight, Total: total, BootID: boot}}
	sc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != sidecarapi.StatsPath {
			http.NotFound(w, r)
			return
		}
		sc.mu.Lock()
		b := sc.snap.Append(nil)
		sc.mu.Unlock()
		w.Header().Set("Content-Type", sidecarapi.StatsContentType)
		_, _ = w.Write(b)
	}))
	t.Cleanup(sc.srv.Close)
	return sc
}

func (sc *sidecar) set(inFlight int64, total, boot uint64) {
	sc.mu.Lock()
	sc.snap = sidecarapi.Snapshot{InFlight: inFlight, Total: total, BootID: boot}
	sc.mu.Unlock()
}

func (sc *sidecar) port() int32 {
	_, p, _ := net.SplitHostPort(sc.srv.Listener.Addr().String())
	n, _ := strconv.Atoi(p)
	return int32(n)
}

const ns = "shop"

// appPod is a Running pod of app with an injected sidecar at sc (nil: a pod
// the webhook bypassed).
func appPod(name, app string, sc *sidecar) *corev1.Pod {
	always := corev1.ContainerRestartPolicyAlways
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"ebb.dev/app": app}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1",
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	if sc != nil {
		p.Spec.InitContainers = []corev1.Container{{Name: SidecarContainer, RestartPolicy: &always,
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8012}, {Name: AdminPortName, ContainerPort: sc.port()}}}}
	}
	return p
}

// rig is a Scaler running in-process on a fake API, with its gRPC server on
// an in-memory listener. Only its first tick runs by itself: tests tick by
// hand.
type rig struct {
	t      *testing.T
	s      *Scaler
	client kubernetes.Interface
	lis    *bufconn.Listener
	es     externalscaler.ExternalScalerClient
	conn   *grpc.ClientConn
}

func testOptions(client kubernetes.Interface) Options {
	o := DefaultOptions()
	o.GRPCAddr, o.AdminAddr = "127.0.0.1:0", "127.0.0.1:0"
	o.StaleTicks = 2
	o.Client = client
	l := logr.Discard()
	o.Logger = &l
	return o
}

func newRig(t *testing.T, client kubernetes.Interface, edit func(*Options)) *rig {
	t.Helper()
	if client == nil {
		client = fake.NewClientset()
	}
	o := testOptions(client)
	if edit != nil {
		edit(&o)
	}
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	s.manualTicks = true
	s.grpcLis.Close()
	lis := bufconn.Listen(1 << 20)
	s.grpcLis = lis
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	conn, err := grpc.NewClient("passthrough:///scaler", grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	r := &rig{t: t, s: s, client: client, lis: lis, es: externalscaler.NewExternalScalerClient(conn), conn: conn}
	testwait.For(t, 10*time.Second, "first tick", s.Ready)
	return r
}

// tick runs one tick by hand.
func (r *rig) tick() { r.s.tick(context.Background()) }

func (r *rig) addPod(p *corev1.Pod) {
	r.t.Helper()
	if _, err := r.client.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		r.t.Fatal(err)
	}
	testwait.For(r.t, 10*time.Second, "pod "+p.Name+" in the registry", func() bool {
		r.s.reg.mu.RLock()
		defer r.s.reg.mu.RUnlock()
		return r.s.reg.pods[p.Namespace+"/"+p.Name] != nil
	})
}

func (r *rig) deletePod(name string) {
	r.t.Helper()
	if err := r.client.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		r.t.Fatal(err)
	}
	testwait.For(r.t, 10*time.Second, "pod "+name+" gone from the registry", func() bool {
		r.s.reg.mu.RLock()
		defer r.s.reg.mu.RUnlock()
		return r.s.reg.pods[ns+"/"+name] == nil
	})
}

// pushClient is an activator pushing to the rig's scaler.
func (r *rig) pushClient(activator string) *holdpush.Client {
	c, err := holdpush.NewClient(holdpush.ClientOptions{Activator: activator, Resend: time.Hour, DialOptions: []grpc.DialOption{
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return r.lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
	}})
	if err != nil {
		r.t.Fatal(err)
	}
	c.SetAddresses([]string{"passthrough:///scaler"})
	r.t.Cleanup(c.Close)
	return c
}

func ref(md map[string]string) *externalscaler.ScaledObjectRef {
	return &externalscaler.ScaledObjectRef{Name: "so", Namespace: ns, ScalerMetadata: md}
}

func conc(app string) *externalscaler.ScaledObjectRef {
	return ref(map[string]string{"app": app, "targetConcurrency": "10"})
}

func (r *rig) metric(so *externalscaler.ScaledObjectRef) float64 {
	r.t.Helper()
	resp, err := r.es.GetMetrics(context.Background(), &externalscaler.GetMetricsRequest{ScaledObjectRef: so})
	if err != nil {
		r.t.Fatal(err)
	}
	return resp.MetricValues[0].MetricValueFloat
}

func (r *rig) active(so *externalscaler.ScaledObjectRef) bool {
	r.t.Helper()
	resp, err := r.es.IsActive(context.Background(), so)
	if err != nil {
		r.t.Fatal(err)
	}
	return resp.Result
}
