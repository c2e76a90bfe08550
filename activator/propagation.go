package activator

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

// propagation is run by the elected replica: it asks every ready activator
// pod of the instance which AppRoute generations it serves and sets each
// AppRoute's Propagated condition, true only when every ready replica
// serves the AppRoute's current generation. It is computed per AppRoute.
type propagation struct {
	names     groupsuffix.Names
	log       logr.Logger
	dyn       dynamic.Interface
	src       *sources
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
		key := r.Namespace + "/" + r.Name
		have := 0
		for i := range pods {
			if errs[i] == nil && served[i][key] == r.Generation {
				have++
			}
		}
		cond := metav1.Condition{Type: routingv1alpha1.ConditionPropagated, ObservedGeneration: r.Generation}
		switch {
		case len(pods) == 0:
			cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, "NoReadyActivator", "no ready activator replica serves the routing table"
		case have == len(pods):
			cond.Status, cond.Reason = metav1.ConditionTrue, "AllReplicas"
			cond.Message = fmt.Sprintf("%d/%d ready activator replicas serve generation %d", have, len(pods), r.Generation)
		default:
			cond.Status, cond.Reason = metav1.ConditionFalse, "Pending"
			cond.Message = fmt.Sprintf("%d/%d ready activator replicas serve generation %d", have, len(pods), r.Generation)
		}
		old := meta.FindStatusCondition(r.Status.Conditions, cond.Type)
		if old != nil && old.Status == cond.Status && old.Reason == cond.Reason && old.Message == cond.Message && old.ObservedGeneration == cond.ObservedGeneration {
			continue
		}
		cond.LastTransitionTime = metav1.Now()
		if old != nil && old.Status == cond.Status {
			cond.LastTransitionTime = old.LastTransitionTime
		}
		if err := p.apply(ctx, r, cond); err != nil {
			all = append(all, err)
		}
	}
	return errors.Join(all...)
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

// apply writes only the Propagated condition, by server-side apply on the
// status subresource under FieldManager, leaving the webhook controller's
// conditions and fields alone.
func (p *propagation) apply(ctx context.Context, r *routingv1alpha1.AppRoute, cond metav1.Condition) error {
	body, err := json.Marshal(map[string]any{
		"apiVersion": routingv1alpha1.GroupVersion(p.names.Group()).String(),
		"kind":       routingv1alpha1.Kind,
		"metadata":   map[string]any{"name": r.Name, "namespace": r.Namespace},
		"status":     map[string]any{"conditions": []metav1.Condition{cond}},
	})
	if err != nil {
		return fmt.Errorf("encode Propagated of AppRoute %s/%s: %w", r.Namespace, r.Name, err)
	}
	force := true
	_, err = p.dyn.Resource(routingv1alpha1.GroupVersionResource(p.names.Group())).Namespace(r.Namespace).
		Patch(ctx, r.Name, types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: FieldManager, Force: &force}, "status")
	if err != nil {
		return fmt.Errorf("apply Propagated of AppRoute %s/%s: %w", r.Namespace, r.Name, err)
	}
	return nil
}
