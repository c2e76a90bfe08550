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

// TestTakeOverAfterRelease: act-a, which serves, holds the Lease; act-b
// waits. act-a releases it on its way out (client-go's ReleaseOnCancel:
// the holder emptied), or it is deleted. act-b takes it at once, not at
// its election's next jittered retry (2–4.4 s later).
func TestTakeOverAfterRelease(t *testing.T) {
	names := groupsuffix.MustNew("ebb.dev")
	_, kube := apiServer(t)
	c := Config{Names: names, PodName: "act-b", PodNamespace: "ebb-system", Pool: DefaultPool, ActivatorSelector: "app=activator", AdminPort: 1}
	leases := kube.CoordinationV1().Leases("ebb-system")
	leaseName := poolLeaseName(names, DefaultPool)
	for _, tc := range []struct {
		name    string
		release func(context.Context) error
	}{
		{"released on the way out (holder emptied)", func(ctx context.Context) error {
			cur, err := leases.Get(ctx, leaseName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			now := metav1.NewMicroTime(time.Now())
			cur.Spec = coordinationv1.LeaseSpec{LeaseDurationSeconds: ptr.To(int32(1)), AcquireTime: &now, RenewTime: &now}
			_, err = leases.Update(ctx, cur, metav1.UpdateOptions{})
			return err
		}},
		{"deleted", func(ctx context.Context) error { return leases.Delete(ctx, leaseName, metav1.DeleteOptions{}) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := metav1.NewMicroTime(time.Now())
			lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: leaseName, Namespace: "ebb-system"},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("act-a"), LeaseDurationSeconds: ptr.To(int32(15)), AcquireTime: &now, RenewTime: &now}}
			if _, err := leases.Create(t.Context(), lease, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			defer leases.Delete(context.Background(), leaseName, metav1.DeleteOptions{})
			pods := []corev1.Pod{activatorPod("act-a", "127.0.0.1"), activatorPod("act-b", "127.0.0.2")}
			l := &leadership{kube: kube, cfg: c, log: logr.Discard(), changed: make(chan struct{}, 1), src: &sources{cfg: c, cache: podLister(pods)}}
			ctx, cancel := context.WithCancel(t.Context())
			var wg sync.WaitGroup
			defer wg.Wait()
			defer cancel()
			elected := make(chan time.Time, 1)
			wg.Go(func() {
				l.run(ctx, func() ([]manager.Runnable, error) { elected <- time.Now(); return nil, nil })
			})
			// act-b's election has read act-a's Lease and waits.
			time.Sleep(time.Second)
			select {
			case <-elected:
				t.Fatal("act-b took the Lease of act-a, which serves")
			default:
			}
			released := time.Now()
			if err := tc.release(t.Context()); err != nil {
				t.Fatal(err)
			}
			select {
			case at := <-elected:
				took := at.Sub(released)
				t.Logf("act-b took the Lease %v after its release", took.Round(time.Millisecond))
				if took > time.Second {
					t.Errorf("act-b took the released Lease after %v, want at once (the election's retry is 2–4.4 s)", took.Round(time.Millisecond))
				}
			case <-time.After(6 * time.Second):
				t.Fatal("act-b did not take the released Lease within 6 s")
			}
		})
	}
}
