package scaler

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/ebb-dev/ebb/internal/holdpush"
	"github.com/ebb-dev/ebb/internal/testwait"
)

// rpcRig: hello has 3+4 in flight in two sidecars and 2 held; idle has a
// sidecar with nothing in flight; legacy has a pod without sidecar; cold has
// no pod and 1 held.
func rpcRig(t *testing.T) *rig {
	a, b, idle := newSidecar(t, 3, 100, 1), newSidecar(t, 4, 50, 2), newSidecar(t, 0, 10, 3)
	r := newRig(t, fake.NewClientset(appPod("hello-0", "hello", a), appPod("hello-1", "hello", b), appPod("idle-0", "idle", idle), appPod("legacy-0", "legacy", nil)), nil)
	c := r.pushClient("ebb-system/activator-0")
	c.Set(holdpush.App{Namespace: ns, Name: "hello"}, 2)
	c.Set(holdpush.App{Namespace: ns, Name: "cold"}, 1)
	testwait.For(t, 10*time.Second, "held counts", func() bool {
		return r.s.hold.Held(holdpush.App{Namespace: ns, Name: "cold"}) == 1 && r.s.hold.Held(holdpush.App{Namespace: ns, Name: "hello"}) == 2
	})
	a.set(3, 160, 1)                                           // 60 requests since the first tick
	r.s.firstTick.Store(time.Now().Add(-time.Hour).UnixNano()) // counting for an hour: rate over the full window
	r.tick()
	return r
}

func TestRPCs(t *testing.T) {
	r := rpcRig(t)
	ctx := context.Background()
	rateHello := ref(map[string]string{"app": "hello", "targetRate": "2.5", "rateWindow": "1m"})
	for name, tc := range map[string]struct {
		call func() (proto.Message, error)
		want proto.Message
	}{
		"IsActive in flight": {func() (proto.Message, error) { return r.es.IsActive(ctx, conc("hello")) }, &externalscaler.IsActiveResponse{Result: true}},
		"IsActive idle":      {func() (proto.Message, error) { return r.es.IsActive(ctx, conc("idle")) }, &externalscaler.IsActiveResponse{Result: false}},
		"IsActive bypassed":  {func() (proto.Message, error) { return r.es.IsActive(ctx, conc("legacy")) }, &externalscaler.IsActiveResponse{Result: true}},
		"IsActive held only": {func() (proto.Message, error) { return r.es.IsActive(ctx, conc("cold")) }, &externalscaler.IsActiveResponse{Result: true}},
		"IsActive unknown":   {func() (proto.Message, error) { return r.es.IsActive(ctx, conc("nobody")) }, &externalscaler.IsActiveResponse{Result: false}},
		"IsActive below activation": {func() (proto.Message, error) {
			return r.es.IsActive(ctx, ref(map[string]string{"app": "cold", "targetConcurrency": "1", "activationConcurrency": "1"}))
		}, &externalscaler.IsActiveResponse{Result: false}},
		"GetMetricSpec concurrency": {func() (proto.Message, error) { return r.es.GetMetricSpec(ctx, conc("hello")) },
			&externalscaler.GetMetricSpecResponse{MetricSpecs: []*externalscaler.MetricSpec{{MetricName: "ebb-concurrency-hello", TargetSize: 10, TargetSizeFloat: 10}}}},
		"GetMetricSpec rate": {func() (proto.Message, error) { return r.es.GetMetricSpec(ctx, rateHello) },
			&externalscaler.GetMetricSpecResponse{MetricSpecs: []*externalscaler.MetricSpec{{MetricName: "ebb-rate-hello", TargetSize: 3, TargetSizeFloat: 2.5}}}},
		"GetMetrics concurrency = in flight + held": {func() (proto.Message, error) {
			return r.es.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: conc("hello"), MetricName: "ebb-concurrency-hello"})
		}, &externalscaler.GetMetricsResponse{MetricValues: []*externalscaler.MetricValue{{MetricName: "ebb-concurrency-hello", MetricValue: 9, MetricValueFloat: 9}}}},
		"GetMetrics held only": {func() (proto.Message, error) {
			return r.es.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: conc("cold")})
		}, &externalscaler.GetMetricsResponse{MetricValues: []*externalscaler.MetricValue{{MetricName: "ebb-concurrency-cold", MetricValue: 1, MetricValueFloat: 1}}}},
		"GetMetrics idle": {func() (proto.Message, error) {
			return r.es.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: conc("idle")})
		}, &externalscaler.GetMetricsResponse{MetricValues: []*externalscaler.MetricValue{{MetricName: "ebb-concurrency-idle"}}}},
		"GetMetrics rate = counted / window": {func() (proto.Message, error) {
			return r.es.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: rateHello, MetricName: "ebb-rate-hello"})
		}, &externalscaler.GetMetricsResponse{MetricValues: []*externalscaler.MetricValue{{MetricName: "ebb-rate-hello", MetricValue: 1, MetricValueFloat: 1}}}},
		"health": {func() (proto.Message, error) {
			return healthpb.NewHealthClient(r.conn).Check(ctx, &healthpb.HealthCheckRequest{})
		},
			&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}},
		"health of the scaler service": {func() (proto.Message, error) {
			return healthpb.NewHealthClient(r.conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "externalscaler.ExternalScaler"})
		}, &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := tc.call()
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestGetMetricsOtherMetricName(t *testing.T) {
	r := rpcRig(t)
	_, err := r.es.GetMetrics(context.Background(), &externalscaler.GetMetricsRequest{ScaledObjectRef: conc("hello"), MetricName: "ebb-rate-hello"})
	want := `metric "ebb-rate-hello" is not served for ScaledObject shop/so: its metadata asks for "ebb-concurrency-hello"`
	if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), want) {
		t.Errorf("error = %v, want InvalidArgument with %q", err, want)
	}
}

// Every RPC rejects every bad metadata with InvalidArgument naming the field.
func TestRPCsRejectBadMetadata(t *testing.T) {
	r := newRig(t, nil, nil)
	ctx := context.Background()
	rpcs := map[string]func(*externalscaler.ScaledObjectRef) error{
		"IsActive":      func(so *externalscaler.ScaledObjectRef) error { _, err := r.es.IsActive(ctx, so); return err },
		"GetMetricSpec": func(so *externalscaler.ScaledObjectRef) error { _, err := r.es.GetMetricSpec(ctx, so); return err },
		"GetMetrics": func(so *externalscaler.ScaledObjectRef) error {
			_, err := r.es.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: so})
			return err
		},
		"StreamIsActive": func(so *externalscaler.ScaledObjectRef) error {
			st, err := r.es.StreamIsActive(ctx, so)
			if err != nil {
				return err
			}
			_, err = st.Recv()
			return err
		},
	}
	for rpc, call := range rpcs {
		for name, tc := range badMetadata {
			t.Run(rpc+"/"+name, func(t *testing.T) {
				err := call(ref(tc.md))
				if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), tc.want) {
					t.Errorf("error = %v\nwant InvalidArgument containing %q", err, tc.want)
				}
			})
		}
	}
}

func TestStreamIsActiveSendsCurrentThenChanges(t *testing.T) {
	sc := newSidecar(t, 0, 0, 1)
	r := newRig(t, fake.NewClientset(appPod("hello-0", "hello", sc)), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := r.es.StreamIsActive(ctx, conc("hello"))
	if err != nil {
		t.Fatal(err)
	}
	var got []bool
	recv := func() {
		resp, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, resp.Result)
	}
	recv()          // idle at once
	sc.set(2, 0, 1) // requests in flight, seen at the next tick
	r.tick()
	recv()
	sc.set(0, 0, 1)
	r.tick()
	recv()
	if diff := cmp.Diff([]bool{false, true, false}, got); diff != "" {
		t.Errorf("stream (-want +got):\n%s", diff)
	}
}

// Until the first tick has read every sidecar, the scaler cannot tell an
// idle app from one it has not read: it must not answer "inactive".
func TestNotReadyIsUnavailable(t *testing.T) {
	s, err := New(testOptions(fake.NewClientset()))
	if err != nil {
		t.Fatal(err)
	}
	defer s.grpcLis.Close()
	defer s.adminLis.Close()
	_, err = (&service{s: s}).IsActive(context.Background(), conc("hello"))
	if status.Code(err) != codes.Unavailable {
		t.Errorf("IsActive before the first tick: %v, want Unavailable", err)
	}
}
