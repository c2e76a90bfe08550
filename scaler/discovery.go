package scaler

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/ebb-dev/ebb/internal/sidecarapi"
)

// The webhook's contract: the sidecar is a native sidecar (an init container
// with restartPolicy Always) of this name, serving stats on the container
// port of this name.
const (
	SidecarContainer = "ebb-sidecar"
	AdminPortName    = "ebb-admin"
)

// podInfoFrom reads what the scaler needs from a pod of an app.
//
// Which pods are read: every pod of the app that is Running and has an IP,
// ready or not. A pod that is not ready yet may already serve requests the
// activator forwarded, and a terminating pod is Running while it drains its
// in-flight requests; both must count. Pending pods have no sidecar to read;
// Succeeded and Failed pods serve nothing.
//
// A Running pod with no sidecar was not injected (the webhook was bypassed):
// the scaler cannot see its traffic, so it keeps the app active.
func podInfoFrom(p *corev1.Pod, appLabel string) podInfo {
	in := podInfo{
		key:     p.Namespace + "/" + p.Name,
		uid:     p.UID,
		app:     appKey{Namespace: p.Namespace, Name: p.Labels[appLabel]},
		running: p.Status.Phase == corev1.PodRunning,
		// A pod being deleted is on its way out: its app no longer keeps
		// the apps it needs up (a dependent scaled to zero terminates
		// for its grace period while still Running).
		live: p.DeletionTimestamp == nil && (p.Status.Phase == corev1.PodPending || p.Status.Phase == corev1.PodRunning),
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			in.ready = c.Status == corev1.ConditionTrue
		}
	}
	port, ok := sidecarPort(&p.Spec)
	in.sidecar = ok
	if ok && in.running && p.Status.PodIP != "" {
		in.hostport = net.JoinHostPort(p.Status.PodIP, strconv.Itoa(int(port)))
		in.url = "http://" + in.hostport + sidecarapi.StatsPath
	}
	return in
}

func sidecarPort(spec *corev1.PodSpec) (int32, bool) {
	find := func(cs []corev1.Container, native bool) (int32, bool) {
		for i := range cs {
			c := &cs[i]
			if c.Name != SidecarContainer {
				continue
			}
			if native && (c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways) {
				return 0, false // a plain init container exits before the app starts
			}
			for _, p := range c.Ports {
				if p.Name == AdminPortName {
					return p.ContainerPort, true
				}
			}
			return sidecarapi.DefaultAdminPort, true
		}
		return 0, false
	}
	if port, ok := find(spec.InitContainers, true); ok {
		return port, true
	}
	// Also accept the sidecar as a regular container, as on clusters where
	// native sidecars are off.
	return find(spec.Containers, false)
}

// stripPod keeps only what podInfoFrom reads, so the informer's cache of
// thousands of pods stays small.
func stripPod(appLabel string) cache.TransformFunc {
	return func(obj any) (any, error) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return obj, nil
		}
		out := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
				Labels: map[string]string{appLabel: p.Labels[appLabel]}, DeletionTimestamp: p.DeletionTimestamp,
			},
			Status: corev1.PodStatus{Phase: p.Status.Phase, PodIP: p.Status.PodIP},
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady {
				out.Status.Conditions = []corev1.PodCondition{{Type: c.Type, Status: c.Status}}
			}
		}
		keep := func(cs []corev1.Container) []corev1.Container {
			for _, c := range cs {
				if c.Name == SidecarContainer {
					return []corev1.Container{{Name: c.Name, Ports: c.Ports, RestartPolicy: c.RestartPolicy}}
				}
			}
			return nil
		}
		out.Spec.InitContainers = keep(p.Spec.InitContainers)
		out.Spec.Containers = keep(p.Spec.Containers)
		return out, nil
	}
}

// discover runs a pod informer over all namespaces (pods that carry the app
// label) that keeps the registry current; it returns once the initial list
// is in the registry.
func (s *Scaler) discover(ctx context.Context, client kubernetes.Interface) error {
	appLabel := s.names.AppLabel()
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = appLabel }),
		informers.WithTransform(stripPod(appLabel)))
	inf := factory.Core().V1().Pods().Informer()
	upsert := func(obj any, initial bool) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		if p.Labels[appLabel] == "" { // the label was removed: no longer an app pod
			s.reg.remove(p.Namespace + "/" + p.Name)
			return
		}
		in := podInfoFrom(p, appLabel)
		if s.reg.upsert(in, initial, time.Now()) {
			s.metrics.bypassedSeen.Inc()
			s.log.Info("pod of an app has no ebb sidecar (the webhook was bypassed): its traffic cannot be counted, so the app is kept active",
				"pod", in.key, "app", in.app.Name, "container", SidecarContainer)
		}
	}
	handler, err := inf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc:    upsert,
		UpdateFunc: func(_, obj any) { upsert(obj, false) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				s.reg.remove(d.Key)
				return
			}
			if p, ok := obj.(*corev1.Pod); ok {
				s.reg.remove(p.Namespace + "/" + p.Name)
			}
		},
	})
	if err != nil {
		return fmt.Errorf("watch pods: %w", err)
	}
	factory.Start(ctx.Done())
	stop := factory.Shutdown
	s.stopInformers.Store(&stop)
	if !cache.WaitForCacheSync(ctx.Done(), handler.HasSynced) {
		return fmt.Errorf("list pods with label %s: %w", appLabel, context.Cause(ctx))
	}
	return nil
}
