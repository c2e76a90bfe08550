package control

import (
	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// newManager returns the controller-runtime manager whose cache and
// controllers every loop of the activator runs in: AppRoutes of the
// instance's group, Services, EndpointSlices and Deployments, and only this
// instance's activator pods. The manager serves no metrics or probes of its
// own (the admin port does) and elects no leader (leadership does).
func newManager(cfg *rest.Config, c Config, log logr.Logger) (ctrl.Manager, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("build scheme: %w", err)
	}
	if err := routingv1alpha1.AddToScheme(scheme, c.Names.Group()); err != nil {
		return nil, fmt.Errorf("build scheme: %w", err)
	}
	sel, err := labels.Parse(c.ActivatorSelector)
	if err != nil {
		return nil, fmt.Errorf("--activator-selector: %w", err)
	}
	byObject := map[client.Object]crcache.ByObject{
		&corev1.Pod{}:         {Namespaces: map[string]crcache.Config{c.PodNamespace: {}}, Label: sel},
		&appsv1.Deployment{}:  {Transform: slimDeployment},
		&appsv1.StatefulSet{}: {Transform: slimStatefulSet},
	}
	if c.PoolsConfigMap != "" {
		byObject[&corev1.ConfigMap{}] = crcache.ByObject{Namespaces: map[string]crcache.Config{c.PodNamespace: {}},
			Field: fields.OneTermEqualSelector("metadata.name", c.PoolsConfigMap)}
	}
	// mapper is the manager's REST mapper, set before any informer runs.
	var mapper meta.RESTMapper
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Logger:                 log,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache: crcache.Options{
			SyncPeriod: ptr.To(10 * time.Minute),
			ByObject:   byObject,
			// Nothing reads managedFields: a fleet's cache is smaller
			// without them (TestCacheBytesPerApp).
			// The objects of --scale-targets kinds (read as unstructured by
			// the hand-off) keep only spec.replicas.
			DefaultTransform: func(o any) (any, error) {
				if u, ok := o.(*unstructured.Unstructured); ok && listedKind(mapper, c.ScaleTargets, u.GroupVersionKind().GroupKind()) {
					return slimReplicas(u), nil
				}
				return crcache.TransformStripManagedFields()(o)
			},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("controller manager: %w", err)
	}
	mapper = mgr.GetRESTMapper()
	ctx := context.Background()
	if err := indexSlicesByService(ctx, mgr); err != nil {
		return nil, fmt.Errorf("index EndpointSlices: %w", err)
	}
	// Informers for every kind a loop reads, so the first cache sync waits
	// for all of them.
	for _, obj := range append([]client.Object{&routingv1alpha1.AppRoute{}, &routingv1alpha1.DomainClaim{}, &corev1.Service{}, &discoveryv1.EndpointSlice{}, &appsv1.Deployment{}, &appsv1.StatefulSet{}, &corev1.Pod{}}, poolObjects(c)...) {
		if _, err := mgr.GetCache().GetInformer(ctx, obj); err != nil {
			return nil, fmt.Errorf("watch %T: %w", obj, err)
		}
	}
	return mgr, nil
}

// poolObjects are the kinds the pools' binding reads: the pools ConfigMap
// and Namespaces (for namespace selectors), when pools are configured.
func poolObjects(c Config) []client.Object {
	if c.PoolsConfigMap == "" {
		return nil
	}
	return []client.Object{&corev1.ConfigMap{}, &corev1.Namespace{}}
}

// slimDeployment keeps of a Deployment what the activator reads, its
// replicas (the hand-off publishes a slice for a Deployment scaled to 0):
// the cache holds every Deployment of the cluster, and a pod template is
// most of one.
func slimDeployment(obj any) (any, error) {
	d, ok := obj.(*appsv1.Deployment)
	if !ok {
		return obj, nil
	}
	return &appsv1.Deployment{
		TypeMeta: d.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{Name: d.Name, Namespace: d.Namespace, UID: d.UID, ResourceVersion: d.ResourceVersion,
			Generation: d.Generation, DeletionTimestamp: d.DeletionTimestamp},
		Spec: appsv1.DeploymentSpec{Replicas: d.Spec.Replicas},
	}, nil
}

// slimStatefulSet is slimDeployment for StatefulSets.
func slimStatefulSet(obj any) (any, error) {
	s, ok := obj.(*appsv1.StatefulSet)
	if !ok {
		return obj, nil
	}
	return &appsv1.StatefulSet{
		TypeMeta: s.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: s.Namespace, UID: s.UID, ResourceVersion: s.ResourceVersion,
			Generation: s.Generation, DeletionTimestamp: s.DeletionTimestamp},
		Spec: appsv1.StatefulSetSpec{Replicas: s.Spec.Replicas},
	}, nil
}

// slimReplicas keeps of an object of a --scale-targets kind its identity
// and spec.replicas.
func slimReplicas(u *unstructured.Unstructured) *unstructured.Unstructured {
	out := &unstructured.Unstructured{Object: map[string]any{}}
	out.SetAPIVersion(u.GetAPIVersion())
	out.SetKind(u.GetKind())
	out.SetName(u.GetName())
	out.SetNamespace(u.GetNamespace())
	out.SetUID(u.GetUID())
	out.SetResourceVersion(u.GetResourceVersion())
	out.SetGeneration(u.GetGeneration())
	out.SetDeletionTimestamp(u.GetDeletionTimestamp())
	if r, ok, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "replicas"); ok {
		out.Object["spec"] = map[string]any{"replicas": r}
	}
	return out
}
