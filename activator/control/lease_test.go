package control

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/ebb-dev/ebb/internal/groupsuffix"
)

// TestLeaseTakeOver runs a replica's leadership (client-go's election on
// a real kube-apiserver: envtest, KUBEBUILDER_ASSETS) beside a Lease held
// and freshly renewed by another replica, act-a, whose pod is as the case
// says. The replica takes the Lease over at once (well within the Lease's
// 15 s) only when the API server says act-a's pod cannot serve; a holder
// whose pod is Ready keeps its Lease though its address refuses every
// connection (127.0.0.1, where nothing listens on the admin port): a
// refusal is not the kubelet's word.
func TestLeaseTakeOver(t *testing.T) {
	names := groupsuffix.MustNew("ebb.dev")
	_, kube := apiServer(t)
	c := Config{Names: names, PodName: "act-b", PodNamespace: "ebb-system", Pool: DefaultPool, ActivatorSelector: "app=activator", AdminPort: 1}
	leases := kube.CoordinationV1().Leases("ebb-system")
	leaseName := poolLeaseName(names, DefaultPool)
	for _, tc := range []struct {
		name     string
		holder   func(*corev1.Pod) // nil: its pod is gone
		takeOver bool
	}{
		{"the holder's pod is gone", nil, true},
		{"the holder's pod is not ready", notReady, true},
		{"the holder's process exited", exited, true},
		{"the holder's pod is being deleted", deleting, true},
		{"the holder's pod is ready, its address refuses", func(*corev1.Pod) {}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := metav1.NewMicroTime(time.Now())
			lease := &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: leaseName, Namespace: "ebb-system"},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("act-a"), LeaseDurationSeconds: ptr.To(int32(15)),
					AcquireTime: &now, RenewTime: &now},
			}
			if _, err := leases.Create(t.Context(), lease, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			defer leases.Delete(context.Background(), leaseName, metav1.DeleteOptions{})
			pods := []corev1.Pod{activatorPod("act-b", "127.0.0.2")}
			if tc.holder != nil {
				pods = append(pods, activatorPod("act-a", "127.0.0.1", tc.holder))
			}
			l := &leadership{kube: kube, cfg: c, log: logr.Discard(), changed: make(chan struct{}, 1),
				src: &sources{cfg: c, cache: podLister(pods)}}
			ctx, cancel := context.WithCancel(t.Context())
			var wg sync.WaitGroup
			defer wg.Wait()
			defer cancel()
			elected := make(chan time.Time, 1)
			start := time.Now()
			wg.Go(func() {
				l.run(ctx, func() ([]manager.Runnable, error) {
					elected <- time.Now()
					return nil, nil
				})
			})
			select {
			case at := <-elected:
				if !tc.takeOver {
					t.Fatalf("took the Lease of a holder that can serve after %v", at.Sub(start))
				}
				if took := at.Sub(start); took > 2*time.Second {
					t.Errorf("took the Lease over after %v, want within 2 s (not the Lease's 15 s)", took)
				}
				t.Logf("took the Lease over after %v", at.Sub(start).Round(time.Millisecond))
			case <-time.After(3 * time.Second):
				if tc.takeOver {
					t.Fatal("did not take the Lease of a holder that cannot serve over within 3 s")
				}
				got, err := leases.Get(t.Context(), leaseName, metav1.GetOptions{})
				if err != nil || ptr.Deref(got.Spec.HolderIdentity, "") != "act-a" {
					t.Fatalf("the Lease after 3 s: %v (err %v), want still act-a's", got.Spec.HolderIdentity, err)
				}
			}
		})
	}
}

// podLister is a cache that holds pods (the pool's activator pods), as
// they are: the fake client would drop a deletionTimestamp.
type podLister []corev1.Pod

func (l podLister) Get(_ context.Context, key client.ObjectKey, _ client.Object, _ ...client.GetOption) error {
	return apierrors.NewNotFound(corev1.Resource("pods"), key.Name)
}

func (l podLister) List(_ context.Context, list client.ObjectList, _ ...client.ListOption) error {
	list.(*corev1.PodList).Items = slices.Clone(l)
	return nil
}

// TestReleaseLeaseOf: the Lease is deleted only while the named replica
// holds it.
func TestReleaseLeaseOf(t *testing.T) {
	names := groupsuffix.MustNew("ebb.dev")
	_, kube := apiServer(t)
	c := Config{Names: names, PodName: "act-b", PodNamespace: "ebb-system", Pool: DefaultPool}
	leases := kube.CoordinationV1().Leases("ebb-system")
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: poolLeaseName(names, DefaultPool), Namespace: "ebb-system"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("act-a")}}
	if _, err := leases.Create(t.Context(), lease, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if released, _ := releaseLeaseOf(t.Context(), kube, c, logr.Discard(), "act-c", "test"); released {
		t.Error("released act-a's Lease as act-c's")
	}
	if _, err := leases.Get(t.Context(), lease.Name, metav1.GetOptions{}); err != nil {
		t.Fatalf("act-a's Lease after releasing act-c's: %v", err)
	}
	if released, _ := releaseLeaseOf(t.Context(), kube, c, logr.Discard(), "act-a", "test"); !released {
		t.Error("did not release act-a's Lease")
	}
	if _, err := leases.Get(t.Context(), lease.Name, metav1.GetOptions{}); err == nil {
		t.Error("act-a's Lease still there after its release")
	}
}
