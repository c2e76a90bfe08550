package cluster_test

import (
	"net"
	"testing"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"google.golang.org/grpc"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ebb-dev/ebb/test/cluster"
)

// TestKEDAScalesOutThroughHPA: beyond 0↔1, KEDA hands scaling to the HPA it
// creates, which reads the scaler's metric through KEDA's metrics adapter
// (the cluster's external metrics API): metric 3 with target 1 → 3
// replicas, metric 1 → back to 1, inactive → 0.
func TestKEDAScalesOutThroughHPA(t *testing.T) {
	ctx := t.Context()
	const ns, name = "foundation-hpa", "wide"
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
	noDelay := map[string]any{"stabilizationWindowSeconds": int64(0), "policies": []any{map[string]any{"type": "Percent", "value": int64(100), "periodSeconds": int64(1)}}}
	if err := lc.CreateScaledObject(ctx, cluster.ScaledObject{
		Namespace: ns, Name: name, Min: 0, Max: 3, CooldownPeriod: 2,
		Metadata:    map[string]string{"scalerAddress": lis.Addr().String()},
		HPABehavior: map[string]any{"scaleUp": noDelay, "scaleDown": noDelay},
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-scaler.opened:
	case <-time.After(60 * time.Second):
		t.Fatal("KEDA never opened StreamIsActive to the test scaler")
	}
	begin := time.Now()
	scaler.setValue(true, 3)
	if err := lc.WaitReplicas(ctx, ns, name, 3, 90*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("metric 3, target 1 → replicas=3 in %s (KEDA 0→1, then the HPA)", time.Since(begin).Round(time.Millisecond))
	begin = time.Now()
	scaler.setValue(true, 1)
	if err := lc.WaitReplicas(ctx, ns, name, 1, 90*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("metric 1 → replicas=1 in %s", time.Since(begin).Round(time.Millisecond))
	scaler.set(false)
	if err := lc.WaitReplicas(ctx, ns, name, 0, 60*time.Second); err != nil {
		t.Fatal(err)
	}
}
