package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/groupsuffix"
)

// RoutingPath on the admin port reports what this replica serves.
const RoutingPath = "/routing"

// Served is the body of GET RoutingPath: the generation of every AppRoute
// ("namespace/name") in the replica's routing table.
type Served struct {
	Pod    string           `json:"pod"`
	Routes map[string]int64 `json:"routes"`
}

// propagation is run by the elected replica of each pool: it asks every
// ready activator pod of its pool which AppRoute generations it serves
// and, on each AppRoute the pool admits, sets the Admitted and Propagated
// conditions and the pool's entry in status.pools (Propagated true only
// when every ready replica of the pool serves the AppRoute's current
// generation). The default pool's also marks the routes no pool admits
// (Admitted false, with why).
type propagation struct {
	names     groupsuffix.Names
	log       logr.Logger
	dyn       dynamic.Interface
	src       *sources
	bind      *binder
	pool      string
	adminPort int
	client    *http.Client
}

// propagationDelay lets the replicas take a change in before they are asked.
const propagationDelay = 100 * time.Millisecond

// Reconcile asks the replicas and writes the conditions, on each change
// (after propagationDelay) and every second.
func (p *propagation) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	if err := p.once(ctx); err != nil && ctx.Err() == nil {
		p.log.Error(err, "propagation status not fully written; retrying")
	}
	return reconcile.Result{RequeueAfter: time.Second}, nil
}

func (p *propagation) once(ctx context.Context) error {
	if ps, err := p.bind.current(ctx); len(ps) == 0 {
		return fmt.Errorf("no activator pools known, route status left as it is: %w", err)
	}
	listed, err := p.src.activatorPods(ctx)
	if err != nil {
		return err
	}
	var pods []*corev1.Pod
	for i := range listed {
		if pod := &listed[i]; podReady(pod) && pod.DeletionTimestamp == nil && pod.Status.PodIP != "" {
			pods = append(pods, pod)
		}
	}
	served := make([]map[string]int64, len(pods))
	errs := make([]error, len(pods))
	var wg sync.WaitGroup
	for i, pod := range pods {
		wg.Go(func() { served[i], errs[i] = p.fetch(ctx, pod) })
	}
	wg.Wait()
	var all []error
	for _, r := range p.src.cachedRoutes(ctx) {
		pool, why := p.bind.admit(ctx, r)
		var want []metav1.Condition
		switch {
		case pool == p.pool:
			key := r.Namespace + "/" + r.Name
			have := 0
			for i := range pods {
				if errs[i] == nil && served[i][key] == r.Generation {
					have++
				}
			}
			prop := metav1.Condition{Type: routingv1alpha1.ConditionPropagated, ObservedGeneration: r.Generation}
			switch {
			case len(pods) == 0:
				prop.Status, prop.Reason, prop.Message = metav1.ConditionFalse, "NoReadyActivator", "no ready activator replica of pool "+p.pool+" serves the routing table"
			case have == len(pods):
				prop.Status, prop.Reason = metav1.ConditionTrue, "AllReplicas"
				prop.Message = fmt.Sprintf("%d/%d ready activator replicas of pool %s serve generation %d", have, len(pods), p.pool, r.Generation)
			default:
				prop.Status, prop.Reason = metav1.ConditionFalse, "Pending"
				prop.Message = fmt.Sprintf("%d/%d ready activator replicas of pool %s serve generation %d", have, len(pods), p.pool, r.Generation)
			}
			want = []metav1.Condition{
				{Type: routingv1alpha1.ConditionAdmitted, Status: metav1.ConditionTrue, Reason: "Selected", Message: why, ObservedGeneration: r.Generation},
				prop,
			}
		case pool == "" && p.pool == DefaultPool:
			want = []metav1.Condition{
				{Type: routingv1alpha1.ConditionAdmitted, Status: metav1.ConditionFalse, Reason: "NoPoolSelects", Message: why, ObservedGeneration: r.Generation},
				{Type: routingv1alpha1.ConditionPropagated, Status: metav1.ConditionFalse, Reason: "NotAdmitted", Message: "no activator pool admits the route: see Admitted", ObservedGeneration: r.Generation},
			}
		default:
			continue // another pool's route, or none's and the default pool says so
		}
		if p.upToDate(r, pool, want) {
			continue
		}
		if err := p.apply(ctx, r, pool, want); err != nil {
			all = append(all, err)
		}
	}
	return errors.Join(all...)
}

// upToDate reports whether r's status already has the conditions want
// (top level and, when pool is set, as the only entry of status.pools);
// it sets their transition times from r's where the status is unchanged.
func (p *propagation) upToDate(r *routingv1alpha1.AppRoute, pool string, want []metav1.Condition) bool {
	same := true
	var entry []metav1.Condition
	if len(r.Status.Pools) == 1 && r.Status.Pools[0].Name == pool {
		entry = r.Status.Pools[0].Conditions
	} else if len(r.Status.Pools) > 0 || pool != "" {
		same = false
	}
	now := metav1.Now()
	for i := range want {
		c := &want[i]
		c.LastTransitionTime = now
		old := meta.FindStatusCondition(r.Status.Conditions, c.Type)
		if old != nil && old.Status == c.Status {
			c.LastTransitionTime = old.LastTransitionTime
		}
		if old == nil || old.Status != c.Status || old.Reason != c.Reason || old.Message != c.Message || old.ObservedGeneration != c.ObservedGeneration {
			same = false
		}
		if pool != "" {
			if e := meta.FindStatusCondition(entry, c.Type); e == nil || e.Status != c.Status || e.Reason != c.Reason || e.Message != c.Message || e.ObservedGeneration != c.ObservedGeneration {
				same = false
			}
		}
	}
	return same
}

func (p *propagation) fetch(ctx context.Context, pod *corev1.Pod) (map[string]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	url := "http://" + net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(p.adminPort)) + RoutingPath
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("ask activator %s: %w", pod.Name, err)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("ask activator %s: %w", pod.Name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("ask activator %s: %s", pod.Name, resp.Status)
	}
	var s Served
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		return nil, fmt.Errorf("ask activator %s: %w", pod.Name, err)
	}
	return s.Routes, nil
}

// apply writes the Admitted and Propagated conditions and status.pools
// (the admitting pool's entry, or none) by server-side apply on the status
// subresource under FieldManager, which every pool shares: the pool that
// admits a route replaces the entry of the one that did before, and the
// webhook's and scalers' conditions and fields are left alone.
func (p *propagation) apply(ctx context.Context, r *routingv1alpha1.AppRoute, pool string, conds []metav1.Condition) error {
	entries := []routingv1alpha1.PoolStatus{}
	if pool != "" {
		entries = append(entries, routingv1alpha1.PoolStatus{Name: pool, Conditions: conds})
	}
	body, err := json.Marshal(map[string]any{
		"apiVersion": routingv1alpha1.GroupVersion(p.names.Group()).String(),
		"kind":       routingv1alpha1.Kind,
		"metadata":   map[string]any{"name": r.Name, "namespace": r.Namespace},
		"status":     map[string]any{"conditions": conds, "pools": entries},
	})
	if err != nil {
		return fmt.Errorf("encode the pool status of AppRoute %s/%s: %w", r.Namespace, r.Name, err)
	}
	force := true
	_, err = p.dyn.Resource(routingv1alpha1.GroupVersionResource(p.names.Group())).Namespace(r.Namespace).
		Patch(ctx, r.Name, types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: FieldManager, Force: &force}, "status")
	if err != nil {
		return fmt.Errorf("apply the pool status of AppRoute %s/%s: %w", r.Namespace, r.Name, err)
	}
	return nil
}
