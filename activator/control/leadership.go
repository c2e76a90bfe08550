package control

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// leadership elects the replica that writes the hand-off slices and the
// Propagated conditions, with client-go's leader election on the pool's
// Lease, and follows decide (decide.go, where the safety argument is): a
// replica campaigns only while the API server shows its pod able to
// serve, and steps down when it does not; a replica that can serve
// releases the Lease of a holder whose pod cannot serve or is gone (its
// process crashed or hangs: the kubelet says so, and the API server read
// then confirms it) and campaigns again at once, so a new holder drops the
// old one from every hand-off slice within a few API round trips of the
// kubelet's report instead of a lease duration. A watch on the Lease ends
// a term as soon as the Lease is deleted or another holds it, and starts a
// campaign as soon as it is free. Nothing a replica sees of another over
// the network counts.
type leadership struct {
	kube    kubernetes.Interface
	cfg     Config
	log     logr.Logger
	src     *sources      // its cache holds this instance's activator pods
	changed chan struct{} // an activator pod changed or went: decide now
	leading atomic.Bool
	// cleared is the holder the API server last showed able to serve
	// when this replica's cache said it could not, and when: its Lease is
	// not looked at again for clearedFor.
	cleared struct {
		sync.Mutex
		holder string
		at     time.Time
	}
}

// clearedFor is how long a holder whose pod the API server showed able to
// serve, against this replica's cache, is not checked again (a cache that
// lags: the election reads the Lease as often).
const clearedFor = 2 * time.Second

// decidePoll is how often a replica decides again without a pod event
// (the election reads the Lease's holder every RetryPeriod).
const decidePoll = 100 * time.Millisecond

// run campaigns while the replica can serve, runs the controllers loops
// returns (the hand-off and propagation controllers) while it holds the
// Lease, until ctx ends.
func (l *leadership) run(ctx context.Context, loops func() ([]manager.Runnable, error)) {
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: l.cfg.PodNamespace, Name: poolLeaseName(l.cfg.Names, l.cfg.Pool)},
		Client:     l.kube.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: l.cfg.PodName},
	}
	tick := time.NewTicker(decidePoll)
	defer tick.Stop()
	for ctx.Err() == nil {
		if !l.decide(ctx, "").campaign {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			case <-l.changed:
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
				OnStoppedLeading: func() { // also when it never led this campaign
					if l.leading.Swap(false) {
						l.log.Info("no longer the elected replica")
					}
				},
			},
		})
		if err != nil {
			stop()
			l.log.Error(err, "leader election misconfigured; hand-off and propagation stay off")
			return
		}
		leaseCh := make(chan leaseState, 1)
		go l.watchLease(campaign, leaseCh)
		go func() {
			defer stop()
			sawSelf := false // the watch showed this replica holding the Lease this campaign
			for {
				select {
				case <-campaign.Done():
					return
				case <-tick.C:
				case <-l.changed:
				case s := <-leaseCh:
					leading := l.leading.Load()
					sawSelf = sawSelf || s.holder == l.cfg.PodName
					switch {
					case leading && sawSelf && s.holder != l.cfg.PodName:
						// Released (deleted: another replica saw this one's
						// pod unable to serve) or taken: the new holder
						// writes the slices; this term ends now, not when
						// its renewals have failed for RenewDeadline.
						l.log.Info("the Lease was released or taken: stepping down", "holder", s.holder)
						return
					case !leading && !s.initial && s.holder == "":
						// Released by its holder (deleted, or emptied on
						// the way out): campaign now, not at the
						// election's next jittered retry.
						l.log.V(1).Info("the Lease is free: campaigning now")
						return
					}
					continue
				}
				d := l.decide(campaign, le.GetLeader())
				if d.stepDown || !d.campaign {
					if d.stepDown {
						l.log.Info("stepping down", "why", d.why, "holder", le.GetLeader())
					}
					return
				}
				if d.release != "" && l.release(campaign, d.release, d.why) {
					return // campaign again now
				}
			}
		}()
		le.Run(campaign)
		stop()
	}
}

// decide is decide on this replica's view: its cache's activator pods of
// the pool, and holder, the Lease's holder as the election last read it.
func (l *leadership) decide(ctx context.Context, holder string) decision {
	v := view{self: l.cfg.PodName, holder: holder, leading: l.leading.Load()}
	pods, err := l.src.activatorPods(ctx)
	if err != nil {
		// The cache cannot be read: keep what is (campaign, release nobody).
		return decision{campaign: true}
	}
	v.pods = pods
	return decide(v)
}

// Reconcile sees each activator pod of the instance change or go, and has
// run decide at once.
func (l *leadership) Reconcile(context.Context, reconcile.Request) (reconcile.Result, error) {
	select {
	case l.changed <- struct{}{}:
	default:
	}
	return reconcile.Result{}, nil
}

// release releases holder's Lease (releaseLeaseOf), unless the API server
// showed its pod able to serve less than clearedFor ago.
func (l *leadership) release(ctx context.Context, holder, why string) bool {
	l.cleared.Lock()
	defer l.cleared.Unlock()
	if l.cleared.holder == holder && time.Since(l.cleared.at) < clearedFor {
		return false
	}
	released, serves := releaseLeaseOf(ctx, l.kube, l.cfg, l.log, holder, why)
	if serves {
		l.cleared.holder, l.cleared.at = holder, time.Now()
	}
	return released
}

// releaseLeaseOf deletes the instance's Lease if holder holds it and the
// API server, read now (not this replica's cache, which may lag: a pod
// created since, a status changed since), shows holder's pod gone or
// unable to serve; it reports whether it did, and whether the API server
// showed the pod able to serve.
func releaseLeaseOf(ctx context.Context, kube kubernetes.Interface, cfg Config, log logr.Logger, holder, why string) (released, serves bool) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	leases := kube.CoordinationV1().Leases(cfg.PodNamespace)
	name := poolLeaseName(cfg.Names, cfg.Pool)
	lease, err := leases.Get(ctx, name, metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != holder {
		return false, false
	}
	pod, err := kube.CoreV1().Pods(cfg.PodNamespace).Get(ctx, holder, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		why = "its pod is gone"
	case err != nil:
		log.Error(err, "read the pod of the Lease's holder", "holder", holder)
		return false, false
	default:
		ok, fresh := canServe(pod)
		if ok {
			log.V(1).Info("the API server shows the Lease's holder able to serve (this replica's cache lags): not released", "holder", holder, "cached", why)
			return false, true
		}
		why = fresh
	}
	rv := lease.ResourceVersion
	if err := leases.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}}); err != nil {
		if !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			log.Error(err, "release the Lease of a holder that cannot serve", "holder", holder)
		}
		return false, false
	}
	log.Info("released the Lease of a holder that cannot serve", "holder", holder, "why", why)
	return true, false
}

// leaseState is the pool's Lease as the API server showed it: its holder,
// "" when it is gone or released; initial is the state the watch began
// with, not a change.
type leaseState struct {
	holder  string
	initial bool
}

// watchLease sends every change of the pool's Lease's holder on ch (the
// latest only), until ctx ends: one watch on one object per campaign, so
// a holder steps down when its Lease is taken or deleted, and the others
// campaign when it is released, at once rather than at the election's
// next read (every RetryPeriod, jittered).
func (l *leadership) watchLease(ctx context.Context, ch chan leaseState) {
	leases := l.kube.CoordinationV1().Leases(l.cfg.PodNamespace)
	byName := fields.OneTermEqualSelector("metadata.name", poolLeaseName(l.cfg.Names, l.cfg.Pool)).String()
	send := func(s leaseState) {
		select {
		case <-ch:
		default:
		}
		ch <- s
	}
	holderOf := func(o runtime.Object) string {
		if lease, ok := o.(*coordinationv1.Lease); ok {
			return ptr.Deref(lease.Spec.HolderIdentity, "")
		}
		return ""
	}
	first, last := true, ""
	for ctx.Err() == nil {
		list, err := leases.List(ctx, metav1.ListOptions{FieldSelector: byName})
		if err == nil {
			cur := ""
			for i := range list.Items {
				cur = holderOf(&list.Items[i])
			}
			if first || cur != last {
				send(leaseState{holder: cur, initial: first})
			}
			first, last = false, cur
			var w watch.Interface
			if w, err = leases.Watch(ctx, metav1.ListOptions{FieldSelector: byName, ResourceVersion: list.ResourceVersion}); err == nil {
				for ev := range w.ResultChan() {
					if ev.Type == watch.Error {
						break
					}
					cur := ""
					if ev.Type != watch.Deleted {
						cur = holderOf(ev.Object)
					}
					if ev.Type == watch.Bookmark || cur == last {
						continue
					}
					last = cur
					send(leaseState{holder: cur})
				}
				w.Stop()
				continue
			}
		}
		if ctx.Err() == nil {
			l.log.V(1).Info("watch the pool's Lease; retrying", "err", err.Error())
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}
