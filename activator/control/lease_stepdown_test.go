package control

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/ebb-dev/ebb/internal/groupsuffix"
)

// TestOldHolderStepsDownAtOnce: act-a leads; another replica releases
// its Lease and takes it (act-b holds it, freshly renewed). How long do
// act-a's hand-off loops (the term's context) keep running beside act-b's?
// The package doc says "for a moment after a release": 14 s before the
// Lease watch and decide's step-down on another holder, now within ms.
func TestOldHolderStepsDownAtOnce(t *testing.T) {
	names := groupsuffix.MustNew("ebb.dev")
	_, kube := apiServer(t)
	c := Config{Names: names, PodName: "act-a", PodNamespace: "ebb-system", Pool: DefaultPool, ActivatorSelector: "app=activator", AdminPort: 1}
	leases := kube.CoordinationV1().Leases("ebb-system")
	leaseName := poolLeaseName(names, DefaultPool)
	pods := []corev1.Pod{activatorPod("act-a", "127.0.0.1"), activatorPod("act-b", "127.0.0.2")}
	l := &leadership{kube: kube, cfg: c, log: logr.Discard(), changed: make(chan struct{}, 1), src: &sources{cfg: c, cache: podLister(pods)}}
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	elected, ended := make(chan struct{}, 1), make(chan time.Time, 1)
	wg.Go(func() {
		l.run(ctx, func() ([]manager.Runnable, error) {
			elected <- struct{}{}
			return []manager.Runnable{manager.RunnableFunc(func(ctx context.Context) error { <-ctx.Done(); ended <- time.Now(); return nil })}, nil
		})
	})
	select {
	case <-elected:
	case <-time.After(5 * time.Second):
		t.Fatal("act-a not elected")
	}
	// act-b releases act-a's Lease (its view says act-a cannot serve) and
	// takes it: delete, then create as act-b.
	if err := leases.Delete(t.Context(), leaseName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	took := time.Now()

	now := metav1.NewMicroTime(time.Now())
	stop := make(chan struct{})
	go func() { // act-b renews every 2 s, as its elector would
		for {
			now := metav1.NewMicroTime(time.Now())
			cur, err := leases.Get(context.Background(), leaseName, metav1.GetOptions{})
			if err == nil {
				cur.Spec.HolderIdentity, cur.Spec.RenewTime, cur.Spec.LeaseDurationSeconds = ptr.To("act-b"), &now, ptr.To(int32(15))
				leases.Update(context.Background(), cur, metav1.UpdateOptions{})
			}
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Second):
			}
		}
	}()
	defer close(stop)
	_ = now
	select {
	case at := <-ended:
		t.Logf("act-a's loops ended %v after act-b took the Lease", at.Sub(took).Round(time.Millisecond))
		if at.Sub(took) > 3*time.Second {
			t.Errorf("act-a kept its hand-off loops %v beside act-b's, want within one renew (2 s)", at.Sub(took).Round(time.Millisecond))
		}
	case <-time.After(20 * time.Second):
		t.Fatal("act-a's loops still run 20 s after act-b took its Lease")
	}
}
