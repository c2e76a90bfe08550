package control

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/ebb-dev/ebb/internal/groupsuffix"
)

// TestLaggingCacheKeepsLiveHoldersLease: the API server shows the
// holder act-a's pod Running and Ready (the kubelet's word), but replica
// act-b's informer cache lags: act-a is not yet in it ("new pod"), or has
// its earlier NotReady status ("stale status"). The package doc's rule says
// only the kubelet's word as the API server shows it releases a Lease;
// act-b must not take the Lease of a holder the API server shows serving.
func TestLaggingCacheKeepsLiveHoldersLease(t *testing.T) {
	names := groupsuffix.MustNew("ebb.dev")
	_, kube := apiServer(t)
	ctx0 := t.Context()
	// act-a on the API server: Running, Ready.
	live := activatorPod("act-a", "127.0.0.1")
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "act-a", Namespace: "ebb-system", Labels: map[string]string{"app": "activator"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "activator", Image: "x"}}}}
	created, err := kube.CoreV1().Pods("ebb-system").Create(ctx0, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Status = live.Status
	if _, err := kube.CoreV1().Pods("ebb-system").UpdateStatus(ctx0, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	c := Config{Names: names, PodName: "act-b", PodNamespace: "ebb-system", Pool: DefaultPool, ActivatorSelector: "app=activator", AdminPort: 1}
	leases := kube.CoordinationV1().Leases("ebb-system")
	leaseName := poolLeaseName(names, DefaultPool)
	for _, tc := range []struct {
		name  string
		cache []corev1.Pod
	}{
		{"new pod not yet in the cache", []corev1.Pod{activatorPod("act-b", "127.0.0.2")}},
		{"stale NotReady status in the cache", []corev1.Pod{activatorPod("act-b", "127.0.0.2"), activatorPod("act-a", "127.0.0.1", notReady)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := metav1.NewMicroTime(time.Now())
			lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: leaseName, Namespace: "ebb-system"},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("act-a"), LeaseDurationSeconds: ptr.To(int32(15)), AcquireTime: &now, RenewTime: &now}}
			if _, err := leases.Create(t.Context(), lease, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			defer leases.Delete(context.Background(), leaseName, metav1.DeleteOptions{})
			l := &leadership{kube: kube, cfg: c, log: logr.Discard(), changed: make(chan struct{}, 1), src: &sources{cfg: c, cache: podLister(tc.cache)}}
			ctx, cancel := context.WithCancel(t.Context())
			var wg sync.WaitGroup
			defer wg.Wait()
			defer cancel()
			elected := make(chan struct{}, 1)
			wg.Go(func() {
				l.run(ctx, func() ([]manager.Runnable, error) { elected <- struct{}{}; return nil, nil })
			})
			select {
			case <-elected:
				t.Fatal("act-b released and took the Lease of act-a, which the API server shows Running and Ready")
			case <-time.After(3 * time.Second):
			}
		})
	}
}
