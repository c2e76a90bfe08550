package control

import (
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// leadership elects the replica that writes the hand-off slices and the
// Propagated conditions: one writer at a time, always a replica that can
// serve. A replica campaigns only while its own pod is Ready and steps down
// when it is not; any replica releases the Lease of a holder whose pod is
// gone or not Ready (its process crashed or hangs: the kubelet says so), and
// the others campaign again at once, so a new holder drops the old one from
// every hand-off slice within a few API round trips of the kubelet's report
// instead of a lease duration.
type leadership struct {
	kube    kubernetes.Interface
	cfg     Config
	log     logr.Logger
	src     *sources      // its cache holds this instance's activator pods
	retry   chan struct{} // a holder was released: campaign again now
	leading atomic.Bool
	// adminPort is every replica's admin port; refusals counts the checks
	// in a row that found the holder's refusing connections.
	adminPort int
	refusals  int
}

// readyPoll is how often a replica looks at its own pod's readiness (in its
// informer's cache) while it waits to campaign or leads.
const readyPoll = 100 * time.Millisecond

// run campaigns while the replica is ready, runs the controllers loops
// returns (the hand-off and propagation controllers) while it holds the
// Lease, until ctx ends.
func (l *leadership) run(ctx context.Context, loops func() ([]manager.Runnable, error)) {
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: l.cfg.PodNamespace, Name: poolLeaseName(l.cfg.Names, l.cfg.Pool)},
		Client:     l.kube.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: l.cfg.PodName},
	}
	tick := time.NewTicker(readyPoll)
	defer tick.Stop()
	for ctx.Err() == nil {
		if !l.selfReady(ctx) {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			continue
		}
		campaign, stop := context.WithCancel(ctx)
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock: lock, LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
			ReleaseOnCancel: true, Name: poolLeaseName(l.cfg.Names, l.cfg.Pool),
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(ctx context.Context) {
					l.leading.Store(true)
					l.log.Info("elected: running the endpoint hand-off and propagation controllers")
					cs, err := loops()
					if err != nil {
						l.log.Error(err, "hand-off and propagation stay off this term")
						<-ctx.Done()
						return
					}
					var wg sync.WaitGroup
					for _, c := range cs {
						wg.Go(func() {
							if err := c.Start(ctx); err != nil && ctx.Err() == nil {
								l.log.Error(err, "controller stopped")
							}
						})
					}
					wg.Wait()
				},
				OnStoppedLeading: func() {
					l.leading.Store(false)
					l.log.Info("no longer the elected replica")
				},
			},
		})
		if err != nil {
			stop()
			l.log.Error(err, "leader election misconfigured; hand-off and propagation stay off")
			return
		}
		go func() {
			defer stop()
			for {
				select {
				case <-campaign.Done():
					return
				case <-l.retry:
					if !l.leading.Load() {
						return // campaign again now: the holder was released
					}
				case <-tick.C:
					if !l.selfReady(ctx) {
						if l.leading.Load() {
							l.log.Info("this replica is not ready: stepping down")
						}
						return
					}
					if !l.leading.Load() && l.holderGone(ctx, le.GetLeader()) &&
						releaseLeaseOf(ctx, l.kube, l.cfg, l.log, le.GetLeader(), "its admin port refuses connections: its process is gone") {
						return // campaign again now
					}
				}
			}
		}()
		le.Run(campaign)
		stop()
	}
}

// holderGone reports whether the Lease holder's process is gone: its
// pod's admin port refused a connection on two checks in a row (a crash
// leaves the pod and its address, with nothing listening). It sees a
// crash before the kubelet's next relist and status write do, and a slow
// or hung holder is left to the kubelet's probes (no refusal).
func (l *leadership) holderGone(ctx context.Context, holder string) bool {
	if holder == "" || holder == l.cfg.PodName {
		l.refusals = 0
		return false
	}
	var p corev1.Pod
	if err := l.src.cache.Get(ctx, types.NamespacedName{Namespace: l.cfg.PodNamespace, Name: holder}, &p); err != nil || p.Status.PodIP == "" {
		l.refusals = 0
		return false
	}
	if refused(net.JoinHostPort(p.Status.PodIP, strconv.Itoa(l.adminPort))) {
		l.refusals++
	} else {
		l.refusals = 0
	}
	return l.refusals >= 2
}

// refused reports whether a TCP connection to addr is refused (nothing
// listens there); a timeout or success is not.
func refused(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err == nil {
		c.Close()
		return false
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

// selfReady reports whether this replica's pod is Ready; a replica that
// does not find its pod (not run in one) counts as ready.
func (l *leadership) selfReady(ctx context.Context) bool {
	var p corev1.Pod
	if err := l.src.cache.Get(ctx, types.NamespacedName{Namespace: l.cfg.PodNamespace, Name: l.cfg.PodName}, &p); err != nil {
		return true
	}
	return podReady(&p) && p.DeletionTimestamp == nil
}

// Reconcile sees each activator pod of the instance change or go, and
// releases the Lease when that pod is its holder's and cannot serve.
func (l *leadership) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var p corev1.Pod
	switch err := l.src.cache.Get(ctx, req.NamespacedName, &p); {
	case apierrors.IsNotFound(err):
		l.releaseIfHolderCannotServe(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: req.Namespace, Name: req.Name}}, true)
	case err != nil:
		return reconcile.Result{}, err
	default:
		l.releaseIfHolderCannotServe(ctx, &p, false)
	}
	return reconcile.Result{}, nil
}

// releaseIfHolderCannotServe deletes the instance's Lease when obj is the
// pod of its holder, not this replica, and that pod is deleted or not
// Ready; then it makes this replica campaign again at once. A holder that
// stops gracefully releases the Lease itself.
func (l *leadership) releaseIfHolderCannotServe(ctx context.Context, obj any, deleted bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj, deleted = d.Obj, true
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.Name == l.cfg.PodName || (!deleted && podReady(pod) && pod.DeletionTimestamp == nil) {
		return
	}
	why := "its pod is gone"
	if !deleted {
		why = "its pod is not ready"
	}
	if releaseLeaseOf(ctx, l.kube, l.cfg, l.log, pod.Name, why) {
		select {
		case l.retry <- struct{}{}:
		default:
		}
	}
}

// releaseLeaseOf deletes the instance's Lease if holder holds it; it
// reports whether it did.
func releaseLeaseOf(ctx context.Context, kube kubernetes.Interface, cfg Config, log logr.Logger, holder, why string) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	leases := kube.CoordinationV1().Leases(cfg.PodNamespace)
	name := poolLeaseName(cfg.Names, cfg.Pool)
	lease, err := leases.Get(ctx, name, metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != holder {
		return false
	}
	rv := lease.ResourceVersion
	if err := leases.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}}); err != nil {
		if !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			log.Error(err, "release the Lease of a holder that cannot serve", "holder", holder)
		}
		return false
	}
	log.Info("released the Lease of a holder that cannot serve", "holder", holder, "why", why)
	return true
}
