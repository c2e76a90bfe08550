package cluster_test

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/ebb-dev/ebb/test/cluster"
	"github.com/ebb-dev/ebb/test/workers"
)

// TestWorkersOnTheNode: Options.Workers on the real node. A Worker of the
// test app at 2 replicas gets 2 pods that the kubelet runs, and its
// status.readyReplicas follows the kubelet's readiness; scaled to 1 through
// its scale subresource (as KEDA and the HPA do) it loses one; deleted, its
// last pod goes with it (the controller manager's garbage collector
// follows the controller's ownerReference).
func TestWorkersOnTheNode(t *testing.T) {
	ctx := t.Context()
	const ns, name = "foundation-workers", "w"
	createNamespace(t, ns)
	w, err := workers.New(ns, name, 2, testAppDeployment(ns, name, 0).Spec.Template)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(lc.RestConfig)
	if err != nil {
		t.Fatal(err)
	}
	res := dyn.Resource(workers.GVR).Namespace(ns)
	if _, err := res.Create(ctx, w, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	status := func(replicas, ready int64) {
		t.Helper()
		var last map[string]any
		if err := cluster.WaitFor(ctx, 90*time.Second, "the Worker's status", func(ctx context.Context) (bool, error) {
			o, err := res.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			last, _, _ = unstructured.NestedMap(o.Object, "status")
			r, _, _ := unstructured.NestedInt64(o.Object, "status", "replicas")
			rr, _, _ := unstructured.NestedInt64(o.Object, "status", "readyReplicas")
			return r == replicas && rr == ready && len(podsOf(t, ns, name)) == int(replicas), nil
		}); err != nil {
			t.Fatalf("%v: status %v, want replicas %d, readyReplicas %d; pods %d", err, last, replicas, ready, len(podsOf(t, ns, name)))
		}
	}
	begin := time.Now()
	status(2, 2)
	t.Logf("2 pods ready, as status.readyReplicas says, %s after the Worker was created", time.Since(begin).Round(time.Millisecond))
	for _, p := range podsOf(t, ns, name) {
		if ref := metav1.GetControllerOf(&p); ref == nil || ref.Kind != "Worker" || ref.Name != name {
			t.Errorf("pod %s: controller %+v, want Worker %s", p.Name, ref, name)
		}
	}

	scale, err := res.Get(ctx, name, metav1.GetOptions{}, "scale")
	if err != nil {
		t.Fatal(err)
	}
	if sel, _, _ := unstructured.NestedString(scale.Object, "status", "selector"); sel != "app="+name {
		t.Errorf("the scale subresource's selector is %q, want app=%s", sel, name)
	}
	if err := unstructured.SetNestedField(scale.Object, int64(1), "spec", "replicas"); err != nil {
		t.Fatal(err)
	}
	if _, err := res.Update(ctx, scale, metav1.UpdateOptions{}, "scale"); err != nil {
		t.Fatal(err)
	}
	status(1, 1)

	if err := res.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cluster.WaitFor(ctx, 60*time.Second, "the deleted Worker's pods gone", func(context.Context) (bool, error) {
		return len(podsOf(t, ns, name)) == 0, nil
	}); err != nil {
		t.Fatal(err)
	}
}
