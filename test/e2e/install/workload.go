package install

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/ebb-dev/ebb/test/cluster"
)

// Deployments and StatefulSets, as a Workload's GVR.
var (
	Deployments  = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	StatefulSets = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "statefulsets"}
)

// Workload is an app's scale target of any kind that has spec.replicas
// and status.readyReplicas (a Deployment, a StatefulSet, a Worker): what
// KEDA scales and the AppRoute's scaleTargetRef names.
type Workload struct {
	GVR             schema.GroupVersionResource
	Namespace, Name string
}

func (w Workload) String() string { return w.GVR.Resource + " " + w.Namespace + "/" + w.Name }

// Replicas reads the workload's spec.replicas and status.readyReplicas.
func (w Workload) Replicas(ctx context.Context, c *cluster.Cluster) (replicas, ready int64, err error) {
	dyn, err := dynamic.NewForConfig(c.RestConfig)
	if err != nil {
		return 0, 0, err
	}
	u, err := dyn.Resource(w.GVR).Namespace(w.Namespace).Get(ctx, w.Name, metav1.GetOptions{})
	if err != nil {
		return 0, 0, fmt.Errorf("get %s: %w", w, err)
	}
	replicas, _, _ = unstructured.NestedInt64(u.Object, "spec", "replicas")
	ready, _, _ = unstructured.NestedInt64(u.Object, "status", "readyReplicas")
	return replicas, ready, nil
}

// WaitReplicas waits until the workload's spec.replicas is want (at least
// want with atLeast) and, with ready, as many of its pods are ready.
func (w Workload) WaitReplicas(ctx context.Context, c *cluster.Cluster, want int64, atLeast, ready bool, timeout time.Duration) error {
	var last string
	err := cluster.WaitFor(ctx, timeout, fmt.Sprintf("%s at %d replicas (at least: %t, ready: %t)", w, want, atLeast, ready), func(ctx context.Context) (bool, error) {
		n, r, err := w.Replicas(ctx, c)
		if err != nil {
			return false, err
		}
		last = fmt.Sprintf("replicas %d, ready %d", n, r)
		return (n == want || atLeast && n > want) && (!ready || r >= want), nil
	})
	if err != nil {
		return fmt.Errorf("%w (last: %s)", err, last)
	}
	return nil
}

// WaitWorkloadAtZero is WaitAtZero for an app whose workload is w: KEDA
// has set its replicas to 0, its pods are gone, the activator's hand-off
// slice is published and kube-proxy routes the ClusterIP to the activator.
func (r *Release) WaitWorkloadAtZero(ctx context.Context, c *cluster.Cluster, w Workload, a *AppAtZero, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	if err := w.WaitReplicas(ctx, c, 0, false, false, timeout); err != nil {
		return err
	}
	return r.waitPodsGoneAndHandedOff(ctx, c, a, deadline)
}
