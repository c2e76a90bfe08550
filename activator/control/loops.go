package control

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// The activator's control loops are controller-runtime controllers, as the
// webhook's are. The routing table, the hand-off slices and the Propagated
// conditions are each computed from everything at once, so each of those
// controllers has one key: any watched change enqueues it (changes that
// come while a reconcile runs are coalesced into the next), and Reconcile
// asks to run again after a period of its own.

// everything is the one key of a whole-state controller.
var everything = reconcile.Request{NamespacedName: types.NamespacedName{Name: "everything"}}

// newLoop returns an unmanaged controller named name that reconciles
// everything with r on any change of the objects of the kinds of watch,
// after delay (0: at once). Add it to the manager, or start it for as long
// as this replica leads: a new one for each term (its name may repeat),
// whose watches end with it.
func newLoop(mgr ctrl.Manager, name string, r reconcile.Reconciler, delay time.Duration, watch ...client.Object) (controller.Controller, error) {
	c, err := controller.NewUnmanaged(name, controller.Options{
		Reconciler:              r,
		MaxConcurrentReconciles: 1,
		SkipNameValidation:      ptr.To(true),
		Logger:                  mgr.GetLogger().WithName(name),
	})
	if err != nil {
		return nil, err
	}
	for _, obj := range watch {
		if err := c.Watch(changes{cache: mgr.GetCache(), obj: obj, delay: delay}); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// changes is a watch source that enqueues everything on any change of the
// cache's objects of obj's kind, and removes its handler from the shared
// informer when the controller stops (controller-runtime's Kind source
// leaves its own in place, which would pile up over leadership terms).
type changes struct {
	cache crcache.Cache
	obj   client.Object
	delay time.Duration
}

func (s changes) String() string { return fmt.Sprintf("changes of %T", s.obj) }

func (s changes) Start(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	inf, err := s.cache.GetInformer(ctx, s.obj)
	if err != nil {
		return fmt.Errorf("watch %T: %w", s.obj, err)
	}
	enqueue := func() {
		if s.delay > 0 {
			q.AddAfter(everything, s.delay)
		} else {
			q.Add(everything)
		}
	}
	reg, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { enqueue() },
		UpdateFunc: func(any, any) { enqueue() },
		DeleteFunc: func(any) { enqueue() },
	})
	if err != nil {
		return fmt.Errorf("watch %T: %w", s.obj, err)
	}
	go func() {
		<-ctx.Done()
		_ = inf.RemoveEventHandler(reg) // idempotent; fails only for an informer that stopped
	}()
	return nil
}
