package activator

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
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
// as this replica leads: a new one for each term (its name may repeat).
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
	enqueue := func(q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		if delay > 0 {
			q.AddAfter(everything, delay)
		} else {
			q.Add(everything)
		}
	}
	h := handler.Funcs{
		CreateFunc: func(_ context.Context, _ event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(q)
		},
		UpdateFunc: func(_ context.Context, _ event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(q)
		},
		DeleteFunc: func(_ context.Context, _ event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(q)
		},
		GenericFunc: func(_ context.Context, _ event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(q)
		},
	}
	for _, obj := range watch {
		if err := c.Watch(source.Kind[client.Object](mgr.GetCache(), obj, h)); err != nil {
			return nil, err
		}
	}
	return c, nil
}
