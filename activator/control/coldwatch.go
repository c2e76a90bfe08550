package control

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/ebb-dev/ebb/activator/proxy"
	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/internal/workload"
)

// apiWatcher is the ColdStartWatcher of a running activator: for each
// cold start it watches the app's workload (a Deployment typed, any other
// kind through the dynamic client: KEDA scales whatever has the scale
// subresource, and spec.replicas is where it writes) and the app's pods (label
// <suffix>/app) until the cold start ends, and notes the moment each
// change arrives. The API server's own timestamps have a resolution of a
// second, far coarser than a cold start's phases, so the times are the
// activator's, taken as the watch events arrive (a watch event trails its
// write by a few milliseconds).
type apiWatcher struct {
	kube     kubernetes.Interface
	dyn      dynamic.Interface
	mapper   meta.RESTMapper
	appLabel string
	log      logr.Logger
}

// Watch watches the workload target names (workload.Key; empty: none).
func (w *apiWatcher) Watch(ctx context.Context, namespace, app, target string, since time.Time, mark func(int, time.Time)) {
	gk, deployment := workload.ParseKey(target)
	if target != "" && gk != workload.Deployment.GroupKind() {
		w.watchScaled(ctx, namespace, gk, deployment, mark)
		deployment = ""
	}
	if deployment != "" {
		go w.watch(ctx, "deployment", func(ctx context.Context) (watch.Interface, error) {
			return w.kube.AppsV1().Deployments(namespace).Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", deployment).String()})
		}, func(obj any, now time.Time) {
			if d, ok := obj.(*appsv1.Deployment); ok && d.Spec.Replicas != nil && *d.Spec.Replicas > 0 {
				mark(proxy.MarkScaled, now)
			}
		})
	}
	// A pod counts when it was created after the cold start began (the
	// creation timestamp has whole seconds) or seen created by this watch.
	known := map[string]bool{}
	first := true
	go w.watch(ctx, "pods", func(ctx context.Context) (watch.Interface, error) {
		return w.kube.CoreV1().Pods(namespace).Watch(ctx, metav1.ListOptions{LabelSelector: w.appLabel + "=" + app})
	}, func(obj any, now time.Time) {
		p, ok := obj.(*corev1.Pod)
		if !ok || p.DeletionTimestamp != nil {
			return
		}
		if _, seen := known[p.Name]; !seen {
			fresh := !first || !p.CreationTimestamp.Time.Before(since.Truncate(time.Second))
			known[p.Name] = fresh
			if fresh {
				mark(proxy.MarkCreated, now)
			}
		}
		if !known[p.Name] {
			return
		}
		if p.Spec.NodeName != "" {
			mark(proxy.MarkScheduled, now)
		}
		if containersStarted(p) {
			mark(proxy.MarkStarted, now)
		}
	}, func() { first = false })
}

// mappingTimeout bounds the REST mapper's discovery round trip for a
// cold start's workload kind.
const mappingTimeout = 10 * time.Second

// watchScaled marks MarkScaled when the workload gk/name of namespace has
// spec.replicas above 0. It returns at once (Watch runs under the app's
// mutex): the kind's resource is resolved in the watch's goroutine, and
// only for a kind other than StatefulSet, whose mapping is fixed. A kind
// the API server does not serve, or a lookup that outlasts the cold start
// or mappingTimeout, is logged and left: the pods' marks still come.
func (w *apiWatcher) watchScaled(ctx context.Context, namespace string, gk schema.GroupKind, name string, mark func(int, time.Time)) {
	go func() {
		gvr, err := w.resource(ctx, gk)
		if err != nil {
			if ctx.Err() == nil {
				w.log.V(1).Info("cannot watch the app's workload for cold-start phases", "kind", gk.String(), "error", err.Error())
			}
			return
		}
		w.watch(ctx, strings.ToLower(gk.Kind), func(ctx context.Context) (watch.Interface, error) {
			return w.dyn.Resource(gvr).Namespace(namespace).Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
		}, func(obj any, now time.Time) {
			if u, ok := obj.(*unstructured.Unstructured); ok {
				if n, set, _ := workload.Replicas(u); set && n > 0 {
					mark(proxy.MarkScaled, now)
				}
			}
		})
	}()
}

// resource is gk's resource: StatefulSet's without asking, any other
// kind's from the REST mapper, given up when ctx ends or after
// mappingTimeout (the mapper's lookup takes no context: one given up
// finishes in a goroutine of its own).
func (w *apiWatcher) resource(ctx context.Context, gk schema.GroupKind) (schema.GroupVersionResource, error) {
	if gk == workload.StatefulSet.GroupKind() {
		return schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "statefulsets"}, nil
	}
	type result struct {
		m   *meta.RESTMapping
		err error
	}
	done := make(chan result, 1)
	go func() {
		m, err := w.mapper.RESTMapping(gk)
		done <- result{m, err}
	}()
	timeout := time.NewTimer(mappingTimeout)
	defer timeout.Stop()
	select {
	case r := <-done:
		if r.err != nil {
			return schema.GroupVersionResource{}, r.err
		}
		return r.m.Resource, nil
	case <-ctx.Done():
		return schema.GroupVersionResource{}, ctx.Err()
	case <-timeout.C:
		return schema.GroupVersionResource{}, fmt.Errorf("resolve %s: no answer from API discovery in %v", gk, mappingTimeout)
	}
}

// containersStarted reports whether every container of p (the app's, not
// the init ones) runs.
func containersStarted(p *corev1.Pod) bool {
	if len(p.Status.ContainerStatuses) == 0 {
		return false
	}
	for _, c := range p.Status.ContainerStatuses {
		if c.State.Running == nil {
			return false
		}
	}
	return true
}

// watch runs one watch until ctx ends, reopening it if the API server
// ends it; seen gets each object with the time its event arrived, and
// synced (if any) is called once the first events are in.
func (w *apiWatcher) watch(ctx context.Context, what string, open func(context.Context) (watch.Interface, error), seen func(any, time.Time), synced ...func()) {
	for ctx.Err() == nil {
		wi, err := open(ctx)
		if err != nil {
			w.log.V(1).Info("cannot watch for cold-start phases", "what", what, "error", err.Error())
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		w.drain(ctx, wi, seen, synced)
		wi.Stop()
	}
}

func (w *apiWatcher) drain(ctx context.Context, wi watch.Interface, seen func(any, time.Time), synced []func()) {
	idle := time.NewTimer(50 * time.Millisecond)
	defer idle.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-idle.C:
			for _, f := range synced {
				f()
			}
			synced = nil
		case ev, ok := <-wi.ResultChan():
			if !ok {
				return
			}
			if ev.Type == watch.Added || ev.Type == watch.Modified {
				seen(ev.Object, time.Now())
			}
		}
	}
}

// coldStartStatus writes each finished cold start into its AppRoute's
// status.lastColdStart (server-side apply, a field manager of its own so
// that the Propagated condition's applies leave it alone).
type coldStartStatus struct {
	names groupsuffix.Names
	dyn   dynamic.Interface
	pod   string
	log   logr.Logger
}

// ColdStartFieldManager owns status.lastColdStart.
const ColdStartFieldManager = "ebb-activator-coldstart"

func (c *coldStartStatus) record(rec proxy.ColdStartRecord) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.apply(ctx, rec); err != nil {
			c.log.Info("cannot record the cold start in the AppRoute's status", "app", rec.Namespace+"/"+rec.App, "error", err.Error())
			return
		}
		c.log.V(1).Info("cold start recorded", "app", rec.Namespace+"/"+rec.App, "total", rec.Total().String())
	}()
}

func (c *coldStartStatus) apply(ctx context.Context, rec proxy.ColdStartRecord) error {
	cs := routingv1alpha1.ColdStart{Began: metav1.NewMicroTime(rec.Began), Total: metav1.Duration{Duration: rec.Total()}, Activator: c.pod}
	for i, d := range rec.Phases {
		cs.Phases = append(cs.Phases, routingv1alpha1.ColdStartPhase{Name: proxy.PhaseNames[i], Duration: metav1.Duration{Duration: d}})
	}
	body, err := json.Marshal(map[string]any{
		"apiVersion": routingv1alpha1.GroupVersion(c.names.Group()).String(),
		"kind":       routingv1alpha1.Kind,
		"metadata":   map[string]any{"name": rec.App, "namespace": rec.Namespace},
		"status":     map[string]any{"lastColdStart": cs},
	})
	if err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	_, err = c.dyn.Resource(routingv1alpha1.GroupVersionResource(c.names.Group())).Namespace(rec.Namespace).
		Patch(ctx, rec.App, types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: ColdStartFieldManager, Force: ptr.To(true)}, "status")
	if err != nil {
		return fmt.Errorf("apply status.lastColdStart: %w", err)
	}
	return nil
}
