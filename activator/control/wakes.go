package control

import (
	"cmp"

	"github.com/ebb-dev/ebb/activator/proxy"
	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/routing"
)

// wakesOf is r's spec.wakes and spec.wakeOrder for the Router; nil for an
// app without wakes, so that it costs the request path nothing. The
// webhook fills each wake's namespace; one left empty (an AppRoute
// written by hand) is r's own, as in a RoutePolicy.
func wakesOf(r *routingv1alpha1.AppRoute) *proxy.Wakes {
	if len(r.Spec.Wakes) == 0 {
		return nil
	}
	w := &proxy.Wakes{Apps: make([]routing.Key, len(r.Spec.Wakes)), Ordered: r.Spec.WakeOrder == routingv1alpha1.WakeOrdered}
	for i, d := range r.Spec.Wakes {
		w.Apps[i] = routing.Key{Namespace: cmp.Or(d.Namespace, r.Namespace), Name: d.App}
	}
	return w
}
