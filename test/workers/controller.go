package workers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
)

// The controller's bounds: how many pods one sync creates or deletes (the
// rest on the next sync, at once), and how long a failing Worker waits at
// most before it is synced again.
const (
	maxChangesPerSync = 20
	maxRetryDelay     = 5 * time.Second
)

// Controller keeps every Worker's pods at its spec.replicas, the way a
// ReplicaSet controller does, kept tiny: it creates pods from spec.template
// (generateName "<worker>-", the template's labels and annotations, a
// controller ownerReference to the Worker) and deletes the newest first,
// and it writes status.replicas, status.readyReplicas and status.selector
// through the status subresource. A Worker's pods are the pods its
// spec.selector matches whose controller is that Worker; pods being
// deleted and pods that have ended do not count. It adopts no orphans and
// leaves the pods of a deleted Worker to the garbage collector.
//
// Each sync reads the pods from the API server, not from a cache, so a pod
// it just created or deleted is always counted as such; the watches only
// say which Worker to sync.
type Controller struct {
	kube    kubernetes.Interface
	workers dynamic.NamespaceableResourceInterface
	logf    func(string, ...any)
	queue   workqueue.TypedRateLimitingInterface[cache.ObjectName]
	lister  cache.GenericLister
	done    chan struct{}
	err     error
}

// Start starts a Controller for the Workers of every namespace, waits
// until its watches have synced, and returns it; it runs until ctx ends
// (Done then closes). The Worker CRD must be established. logf receives a
// line per change it makes and per error; nil is silent.
func Start(ctx context.Context, cfg *rest.Config, logf func(string, ...any)) (*Controller, error) {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("worker controller: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("worker controller: %w", err)
	}
	c := &Controller{
		kube: kube, workers: dyn.Resource(GVR), logf: logf, done: make(chan struct{}),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[cache.ObjectName](50*time.Millisecond, maxRetryDelay),
			workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: "workers"}),
	}
	ctx, cancel := context.WithCancel(ctx)
	workerInformers := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 10*time.Minute)
	wi := workerInformers.ForResource(GVR)
	c.lister = wi.Lister()
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingObjectToName(obj); err == nil {
			c.queue.Add(key)
		}
	}
	if _, err := wi.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, obj any) { enqueue(obj) }, DeleteFunc: enqueue,
	}); err != nil {
		cancel()
		return nil, fmt.Errorf("worker controller: watch Workers: %w", err)
	}
	podInformers := informers.NewSharedInformerFactory(kube, 10*time.Minute)
	pi := podInformers.Core().V1().Pods().Informer()
	owner := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		if ref := metav1.GetControllerOf(p); ref != nil && ref.APIVersion == GroupVersion.String() && ref.Kind == GVK.Kind {
			c.queue.Add(cache.ObjectName{Namespace: p.Namespace, Name: ref.Name})
		}
	}
	if _, err := pi.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: owner, UpdateFunc: func(_, obj any) { owner(obj) }, DeleteFunc: owner,
	}); err != nil {
		cancel()
		return nil, fmt.Errorf("worker controller: watch pods: %w", err)
	}
	workerInformers.Start(ctx.Done())
	podInformers.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), wi.Informer().HasSynced, pi.HasSynced) {
		cancel()
		workerInformers.Shutdown()
		podInformers.Shutdown()
		return nil, fmt.Errorf("worker controller: watches did not sync: %w", context.Cause(ctx))
	}
	var loop sync.WaitGroup
	loop.Go(func() {
		for c.next(ctx) {
		}
	})
	go func() {
		<-ctx.Done()
		c.queue.ShutDown()
		loop.Wait()
		workerInformers.Shutdown()
		podInformers.Shutdown()
		cancel()
		close(c.done)
	}()
	return c, nil
}

// Done is closed once the controller has stopped, after its context ended.
func (c *Controller) Done() <-chan struct{} { return c.done }

// next syncs one Worker from the queue; false once the queue shuts down.
func (c *Controller) next(ctx context.Context) bool {
	key, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(key)
	again, err := c.sync(ctx, key)
	switch {
	case ctx.Err() != nil:
		c.queue.Forget(key)
	case err != nil:
		c.logf("worker %s: %v (retry %d)", key, err, c.queue.NumRequeues(key)+1)
		c.queue.AddRateLimited(key)
	case again:
		c.queue.Forget(key)
		c.queue.Add(key)
	default:
		c.queue.Forget(key)
	}
	return true
}

// sync brings the Worker's pods towards spec.replicas (at most
// maxChangesPerSync changes; again says there are more to make) and writes
// its status.
func (c *Controller) sync(ctx context.Context, key cache.ObjectName) (again bool, err error) {
	obj, err := c.lister.ByNamespace(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		return false, nil // its pods go with it (garbage collector)
	}
	if err != nil {
		return false, err
	}
	w, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return false, fmt.Errorf("unexpected object %T", obj)
	}
	if w.GetDeletionTimestamp() != nil {
		return false, nil
	}
	spec, err := specOf(w)
	if err != nil {
		return false, err // a Worker that cannot run: an error each sync, bounded by the rate limiter
	}
	list, err := c.kube.CoreV1().Pods(key.Namespace).List(ctx, metav1.ListOptions{LabelSelector: spec.selector.String()})
	if err != nil {
		return false, fmt.Errorf("list pods: %w", err)
	}
	pods := livePods(list.Items, w.GetUID())
	var errs []error
	switch diff := int(spec.replicas) - len(pods); {
	case diff > 0:
		n := min(diff, maxChangesPerSync)
		again = diff > n
		for range n {
			p, err := c.kube.CoreV1().Pods(key.Namespace).Create(ctx, newPod(w, spec.template), metav1.CreateOptions{})
			if err != nil {
				errs = append(errs, fmt.Errorf("create pod: %w", err))
				break
			}
			c.logf("worker %s: created pod %s (%d of %d)", key, p.Name, len(pods)+1, spec.replicas)
			pods = append(pods, *p)
		}
	case diff < 0:
		n := min(-diff, maxChangesPerSync)
		again = -diff > n
		newestFirst(pods)
		for _, p := range pods[:n] {
			err := c.kube.CoreV1().Pods(key.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}})
			if err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("delete pod %s: %w", p.Name, err))
				continue
			}
			c.logf("worker %s: deleted pod %s (replicas %d)", key, p.Name, spec.replicas)
		}
		pods = pods[n:]
	}
	if err := c.writeStatus(ctx, w, spec, pods); err != nil {
		errs = append(errs, err)
	}
	return again, errors.Join(errs...)
}

// workerSpec is what the controller reads of a Worker.
type workerSpec struct {
	replicas int64
	selector labels.Selector
	template corev1.PodTemplateSpec
}

func specOf(w *unstructured.Unstructured) (workerSpec, error) {
	var s workerSpec
	replicas, found, err := unstructured.NestedInt64(w.Object, "spec", "replicas")
	if err != nil {
		return s, fmt.Errorf("spec.replicas: %w", err)
	}
	s.replicas = 1 // the CRD's default
	if found {
		s.replicas = replicas
	}
	raw, found, err := unstructured.NestedMap(w.Object, "spec", "selector")
	if err != nil || !found {
		return s, fmt.Errorf("spec.selector: missing or not an object (%v)", err)
	}
	var sel metav1.LabelSelector
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &sel); err != nil {
		return s, fmt.Errorf("spec.selector: %w", err)
	}
	if s.selector, err = metav1.LabelSelectorAsSelector(&sel); err != nil {
		return s, fmt.Errorf("spec.selector: %w", err)
	}
	if s.selector.Empty() {
		return s, errors.New("spec.selector: selects every pod; give it matchLabels")
	}
	raw, found, err = unstructured.NestedMap(w.Object, "spec", "template")
	if err != nil || !found {
		return s, fmt.Errorf("spec.template: missing or not an object (%v)", err)
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &s.template); err != nil {
		return s, fmt.Errorf("spec.template: %w", err)
	}
	if !s.selector.Matches(labels.Set(s.template.Labels)) {
		return s, fmt.Errorf("spec.selector %q does not match the template's labels %v", s.selector, s.template.Labels)
	}
	return s, nil
}

// livePods are the pods of pods controlled by the Worker with uid that are
// neither being deleted nor ended.
func livePods(pods []corev1.Pod, uid types.UID) []corev1.Pod {
	var out []corev1.Pod
	for _, p := range pods {
		ref := metav1.GetControllerOf(&p)
		if ref == nil || ref.UID != uid || p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		out = append(out, p)
	}
	return out
}

// newestFirst sorts pods by creation, the newest first (by name among
// pods created in the same second).
func newestFirst(pods []corev1.Pod) {
	slices.SortFunc(pods, func(a, b corev1.Pod) int {
		if c := b.CreationTimestamp.Compare(a.CreationTimestamp.Time); c != 0 {
			return c
		}
		switch {
		case a.Name > b.Name:
			return -1
		case a.Name < b.Name:
			return 1
		}
		return 0
	})
}

// newPod is a pod of Worker w from its template.
func newPod(w *unstructured.Unstructured, tmpl corev1.PodTemplateSpec) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: w.GetName() + "-",
			Namespace:    w.GetNamespace(),
			Labels:       tmpl.Labels,
			Annotations:  tmpl.Annotations,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: GroupVersion.String(), Kind: GVK.Kind, Name: w.GetName(), UID: w.GetUID(),
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: tmpl.Spec,
	}
}

// writeStatus writes status.replicas, readyReplicas and selector when they
// changed.
func (c *Controller) writeStatus(ctx context.Context, w *unstructured.Unstructured, spec workerSpec, pods []corev1.Pod) error {
	ready := int64(0)
	for _, p := range pods {
		if podReady(&p) {
			ready++
		}
	}
	want := map[string]any{"replicas": int64(len(pods)), "readyReplicas": ready, "selector": spec.selector.String()}
	have, _, _ := unstructured.NestedMap(w.Object, "status")
	if have["replicas"] == want["replicas"] && have["readyReplicas"] == want["readyReplicas"] && have["selector"] == want["selector"] {
		return nil
	}
	// A merge patch of the status alone: the Worker read from the cache
	// may be older than a scale just written, which an update would
	// refuse as a conflict.
	patch, err := json.Marshal(map[string]any{"status": want})
	if err != nil {
		return err
	}
	if _, err := c.workers.Namespace(w.GetNamespace()).Patch(ctx, w.GetName(), types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("write status: %w", err)
	}
	return nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
