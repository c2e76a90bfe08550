package webhook

import (
	"maps"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/webhook/inject"
)

// runningAppPod is an injected app pod as the API server shows it once
// running: managed fields, status, the sidecar.
func runningAppPod(t testing.TB) *corev1.Pod {
	names := groupsuffix.MustNew(groupsuffix.Default)
	tr := true
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "hello-7d9f8b6c5d-x2x4z", Namespace: "shop", UID: "0d9f6a52-5a3e-4b8e-9a53-1f0c8f7b9e21", ResourceVersion: "123456",
			GenerateName: "hello-7d9f8b6c5d-", CreationTimestamp: metav1.Now(),
			Labels:      map[string]string{"app": "hello", names.AppLabel(): "hello", "pod-template-hash": "7d9f8b6c5d"},
			Annotations: map[string]string{names.Key("hosts"): "hello.example.com"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "hello-7d9f8b6c5d",
				UID: "5b6f7c2e-1a2b-4c3d-8e9f-0a1b2c3d4e5f", Controller: &tr, BlockOwnerDeletion: &tr}},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "app", Image: "ghcr.io/example/hello:1.2.3",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
				HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http")},
			}},
			Resources: corev1.ResourceRequirements{},
		}}, NodeName: "node-1", ServiceAccountName: "default"},
	}
	injected, _, err := inject.Inject(pod, inject.DefaultConfig(names, "test"), inject.Policy{})
	if err != nil {
		t.Fatal(err)
	}
	injected.ManagedFields = []metav1.ManagedFieldsEntry{
		{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &metav1.Time{Time: time.Now()},
			FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: make([]byte, 2400)}},
		{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Subresource: "status", Time: &metav1.Time{Time: time.Now()},
			FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: make([]byte, 1800)}},
	}
	injected.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.7", HostIP: "192.168.0.2", StartTime: &metav1.Time{Time: time.Now()}}
	for _, typ := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
		injected.Status.Conditions = append(injected.Status.Conditions, corev1.PodCondition{Type: typ, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()})
	}
	for _, c := range append(injected.Spec.InitContainers, injected.Spec.Containers...) {
		injected.Status.ContainerStatuses = append(injected.Status.ContainerStatuses, corev1.ContainerStatus{Name: c.Name, Image: c.Image, ImageID: c.Image + "@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
			ContainerID: "containerd://0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", Ready: true,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}})
	}
	return injected
}

// TestPodTransform: the cached pod keeps what PodsInjected reads and
// nothing else.
func TestPodTransform(t *testing.T) {
	pod := runningAppPod(t)
	del := metav1.Now()
	pod.DeletionTimestamp = &del
	got, err := podTransform(pod.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	want := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID, ResourceVersion: pod.ResourceVersion,
		Labels: pod.Labels, DeletionTimestamp: &del},
		Spec:   corev1.PodSpec{InitContainers: []corev1.Container{{Name: inject.ContainerName}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("cached pod (-want +got):\n%s", diff)
	}
	slim := got.(*corev1.Pod)
	if !inject.HasSidecar(&slim.Spec) || podLive(slim) {
		t.Errorf("the cached pod reads as sidecar %v, live %v; want true, false", inject.HasSidecar(&slim.Spec), podLive(slim))
	}
	// Idempotent, as client-go asks of a transform.
	again, err := podTransform(slim.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(got, again); diff != "" {
		t.Errorf("transformed twice (-once +twice):\n%s", diff)
	}
}

// heapBytes is the heap that n objects made by mk take, each.
func heapBytes(n int, mk func() any) uint64 {
	keep := make([]any, n)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range keep {
		keep[i] = mk()
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(keep)
	return (after.HeapAlloc - before.HeapAlloc) / uint64(n)
}

// TestCachedPodSize: a cached app pod is about 2 KiB (mostly the empty
// Pod struct itself, and its labels), not the 11.5 KiB of the pod the API
// server sends. Measured: 2,019 bytes against 11,737 (amd64); the bound
// leaves half as much again.
func TestCachedPodSize(t *testing.T) {
	pod := runningAppPod(t)
	full := heapBytes(1000, func() any { return pod.DeepCopy() })
	slim := heapBytes(1000, func() any {
		o, _ := podTransform(pod.DeepCopy())
		return o
	})
	t.Logf("per cached pod: %d bytes stripped, %d bytes whole", slim, full)
	if slim > 3000 {
		t.Errorf("a cached pod takes %d bytes, want at most 3000", slim)
	}
}

// TestScaledObjectTransform: a cached ScaledObject keeps its scale target
// and triggers, not its status nor managed fields.
func TestScaledObjectTransform(t *testing.T) {
	so := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
		"metadata": map[string]any{"name": "hello", "namespace": "shop", "managedFields": []any{map[string]any{"manager": "keda"}}},
		"spec": map[string]any{"scaleTargetRef": map[string]any{"name": "hello"}, "pollingInterval": int64(30),
			"triggers": []any{map[string]any{"type": "external-push", "metadata": map[string]any{"app": "hello"}}}},
		"status": map[string]any{"conditions": []any{map[string]any{"type": "Ready", "status": "True"}}},
	}}
	got, err := stripTransform(so)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
		"metadata": map[string]any{"name": "hello", "namespace": "shop"},
		"spec": map[string]any{"scaleTargetRef": map[string]any{"name": "hello"},
			"triggers": []any{map[string]any{"type": "external-push", "metadata": map[string]any{"app": "hello"}}}},
	}
	if diff := cmp.Diff(want, got.(*unstructured.Unstructured).Object); diff != "" {
		t.Errorf("cached ScaledObject (-want +got):\n%s", diff)
	}
}

// TestCachedConfigMapSize: the ConfigMap watch covers every ConfigMap of
// the cluster as metadata only, yet kubectl apply keeps a ConfigMap's
// whole data in its last-applied-configuration annotation (Helm, Argo and
// Flux add large annotations too). A cached ConfigMap with a 200 KB
// last-applied annotation costs under 2 KB: the controllers read its
// name, namespace and resourceVersion.
func TestCachedConfigMapSize(t *testing.T) {
	cm := func() *metav1.PartialObjectMetadata {
		return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Name: "big", Namespace: "shop", ResourceVersion: "1", Labels: map[string]string{"app": "shop"},
				Annotations: map[string]string{corev1.LastAppliedConfigAnnotation: `{"apiVersion":"v1","data":{"page.html":"` + strings.Repeat("x", 200<<10) + `"}}`}}}
	}
	// The least of five measures: the package's envtest managers allocate
	// in the background meanwhile.
	const n = 200
	slim := int64(math.MaxInt64)
	for range 5 {
		keep := make([]any, n)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for i := range keep {
			keep[i], _ = stripTransform(cm())
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(keep)
		slim = min(slim, (int64(after.HeapAlloc)-int64(before.HeapAlloc))/n)
	}
	t.Logf("per cached ConfigMap: %d bytes", slim)
	if slim > 2048 {
		t.Errorf("a cached ConfigMap with a 200 KB last-applied annotation takes %d bytes, want under 2048", slim)
	}
}

// TestCachedObjectsDropLastApplied: no cached object but AppRoutes keeps
// kubectl's last-applied-configuration (a copy of the whole object as
// applied): Services, Deployments, RoutePolicies, ScaledObjects.
func TestCachedObjectsDropLastApplied(t *testing.T) {
	big := map[string]string{corev1.LastAppliedConfigAnnotation: strings.Repeat("x", 1<<10), "keep": "me"}
	so := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
		"metadata": map[string]any{"name": "hello", "namespace": "shop", "annotations": map[string]any{corev1.LastAppliedConfigAnnotation: "{}", "keep": "me"}}}}
	for _, o := range []client.Object{
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Annotations: maps.Clone(big)}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Annotations: maps.Clone(big)}},
		&routingv1alpha1.RoutePolicy{ObjectMeta: metav1.ObjectMeta{Name: "web", Annotations: maps.Clone(big)}},
		so,
	} {
		got, err := stripTransform(o)
		if err != nil {
			t.Fatal(err)
		}
		if a := got.(client.Object).GetAnnotations(); a[corev1.LastAppliedConfigAnnotation] != "" || a["keep"] != "me" {
			t.Errorf("cached %T: last-applied-configuration of %d bytes, keep=%q; want none, and keep=me", o, len(a[corev1.LastAppliedConfigAnnotation]), a["keep"])
		}
	}
}
