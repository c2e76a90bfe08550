package cluster_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"google.golang.org/grpc"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ebb-dev/ebb/test/cluster"
)

// switchScaler is a KEDA external scaler whose answer the test flips; every
// flip is pushed at once to the open StreamIsActive streams.
type switchScaler struct {
	externalscaler.UnimplementedExternalScalerServer
	mu      sync.Mutex
	active  bool
	value   int64 // the metric while active
	streams map[chan bool]bool
	opened  chan struct{}
}

func newSwitchScaler() *switchScaler {
	return &switchScaler{streams: map[chan bool]bool{}, opened: make(chan struct{}, 16)}
}

func (s *switchScaler) set(active bool) { s.setValue(active, 1) }

func (s *switchScaler) setValue(active bool, value int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.active, s.value = active, value
	for ch := range s.streams {
		select {
		case ch <- active:
		default:
		}
	}
}

func (s *switchScaler) IsActive(context.Context, *externalscaler.ScaledObjectRef) (*externalscaler.IsActiveResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return &externalscaler.IsActiveResponse{Result: s.active}, nil
}

func (s *switchScaler) StreamIsActive(_ *externalscaler.ScaledObjectRef, stream grpc.ServerStreamingServer[externalscaler.IsActiveResponse]) error {
	ch := make(chan bool, 8)
	s.mu.Lock()
	s.streams[ch] = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.streams, ch)
		s.mu.Unlock()
	}()
	s.opened <- struct{}{}
	for {
		select {
		case <-stream.Context().Done():
			return nil
		case active := <-ch:
			if err := stream.Send(&externalscaler.IsActiveResponse{Result: active}); err != nil {
				return err
			}
		}
	}
}

func (s *switchScaler) GetMetricSpec(context.Context, *externalscaler.ScaledObjectRef) (*externalscaler.GetMetricSpecResponse, error) {
	return &externalscaler.GetMetricSpecResponse{MetricSpecs: []*externalscaler.MetricSpec{{MetricName: "switch", TargetSize: 1}}}, nil
}

func (s *switchScaler) GetMetrics(context.Context, *externalscaler.GetMetricsRequest) (*externalscaler.GetMetricsResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := int64(0)
	if s.active {
		v = s.value
	}
	return &externalscaler.GetMetricsResponse{MetricValues: []*externalscaler.MetricValue{{MetricName: "switch", MetricValue: v}}}, nil
}

// TestKEDAScalesOnExternalPush shows the real KEDA operator scaling a
// Deployment 0→1 when an external-push scaler says "active", the pod serving
// through its Service, and back to 0 after the cooldown when it says
// "inactive".
func TestKEDAScalesOnExternalPush(t *testing.T) {
	ctx := t.Context()
	const ns, name = "foundation-keda", "woken"
	createNamespace(t, ns)

	scaler := newSwitchScaler()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	externalscaler.RegisterExternalScalerServer(srv, scaler)
	go srv.Serve(lis)
	defer srv.Stop()

	if _, err := lc.Client.AppsV1().Deployments(ns).Create(ctx, testAppDeployment(ns, name, 0), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc, err := lc.Client.CoreV1().Services(ns).Create(ctx, service(ns, name), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := lc.CreateScaledObject(ctx, cluster.ScaledObject{
		Namespace: ns, Name: name, Min: 0, Max: 1,
		Metadata: map[string]string{"scalerAddress": lis.Addr().String()},
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-scaler.opened:
	case <-time.After(60 * time.Second):
		t.Fatal("KEDA never opened StreamIsActive to the test scaler")
	}

	activated := time.Now()
	scaler.set(true)
	if err := lc.WaitReplicas(ctx, ns, name, 1, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("KEDA: scaler pushed active → Deployment replicas=1 in %s", time.Since(activated).Round(time.Millisecond))

	if err := cluster.WaitFor(ctx, 60*time.Second, "the woken pod serving through its Service", func(ctx context.Context) (bool, error) {
		_, err := get(ctx, "http://"+svc.Spec.ClusterIP+"/")
		return err == nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("KEDA: scaler pushed active → first 200 through the ClusterIP in %s", time.Since(activated).Round(time.Millisecond))

	deactivated := time.Now()
	scaler.set(false)
	if err := lc.WaitReplicas(ctx, ns, name, 0, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("KEDA: scaler pushed inactive → replicas=0 in %s (cooldownPeriod 3s)", time.Since(deactivated).Round(time.Millisecond))
	if err := cluster.WaitFor(ctx, 30*time.Second, "pod gone", func(context.Context) (bool, error) {
		return len(podsOf(t, ns, name)) == 0, nil
	}); err != nil {
		t.Fatal(err)
	}
}
