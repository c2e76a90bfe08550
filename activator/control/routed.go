package control

import (
	"context"
	"slices"

	discoveryv1 "k8s.io/api/discovery/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// HandoffLists reports whether a hand-off EndpointSlice of the instance
// lists ip, as this replica's cache has them; true when the cache cannot
// tell. A terminating activator keeps accepting while one does: kube-proxy
// may still send it new connections.
func (l *Loops) HandoffLists(ctx context.Context, ip string) bool {
	if ip == "" {
		return false
	}
	var list discoveryv1.EndpointSliceList
	if err := l.mgr.GetCache().List(ctx, &list, client.MatchingLabels{discoveryv1.LabelManagedBy: l.src.names.EndpointSliceManagedBy()}, client.UnsafeDisableDeepCopy); err != nil {
		return true
	}
	for i := range list.Items {
		for _, e := range list.Items[i].Endpoints {
			if slices.Contains(e.Addresses, ip) {
				return true
			}
		}
	}
	return false
}
