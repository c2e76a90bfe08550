package workers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/ebb-dev/ebb/webhook/webhooktest"
)

// apiServer starts a kube-apiserver of the test's own (envtest: no
// kubelet, no scheduler, no garbage collector) with the Worker CRD.
func apiServer(t *testing.T) *rest.Config {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a kube-apiserver (envtest; make test-integration runs it)")
	}
	assets, err := webhooktest.Assets()
	if err != nil {
		t.Fatal(err)
	}
	crd, err := CRD()
	if err != nil {
		t.Fatal(err)
	}
	env := &envtest.Environment{BinaryAssetsDirectory: assets, CRDs: []*apiextensionsv1.CustomResourceDefinition{crd}}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start kube-apiserver (envtest): %v", err)
	}
	t.Cleanup(func() { env.Stop() })
	return cfg
}

// workerPods are the names of the Worker's pods that are not being
// deleted, oldest first, and the pods themselves.
func workerPods(ctx context.Context, kube kubernetes.Interface, ns string) ([]corev1.Pod, error) {
	list, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=w"})
	if err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b corev1.Pod) int { return a.CreationTimestamp.Compare(b.CreationTimestamp.Time) })
	return out, nil
}

// TestControllerKeepsReplicas drives a Worker the way KEDA and an HPA do,
// through its scale subresource, and checks what the API server then holds:
// the pods made from the template and owned by the Worker, the newest
// deleted first on scale-down, a deleted pod replaced, a pod of someone
// else's left alone, and status.replicas, readyReplicas and selector as the
// scale subresource reports them. Readiness is written by the test, as the
// kubelet would write it (envtest has none).
func TestControllerKeepsReplicas(t *testing.T) {
	cfg := apiServer(t)
	ctx := t.Context()
	kube := kubernetes.NewForConfigOrDie(cfg)
	dyn := dynamic.NewForConfigOrDie(cfg)
	const ns = "w"
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cctx, stop := context.WithCancel(ctx)
	defer stop()
	var logs logLines
	c, err := Start(cctx, cfg, logs.logf)
	if err != nil {
		t.Fatal(err)
	}

	// A pod of the Worker's labels that no Worker controls: never counted,
	// never deleted.
	foreign := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "foreign", Namespace: ns, Labels: map[string]string{"app": "w", "tier": "x"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:1"}}}}
	if _, err := kube.CoreV1().Pods(ns).Create(ctx, foreign, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tmpl := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "w", "tier": "x"}, Annotations: map[string]string{"note": "kept"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:1", Args: []string{"--listen=:8080"}}}},
	}
	w, err := New(ns, "w", 1, tmpl)
	if err != nil {
		t.Fatal(err)
	}
	workers := dyn.Resource(GVR).Namespace(ns)
	w, err = workers.Create(ctx, w, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// want waits until the Worker has n pods of its own (besides the
	// foreign one) and its scale subresource says n replicas, ready of
	// them ready, selector app=w,tier=x (New selects the template's labels); it returns the Worker's pods, oldest
	// first.
	want := func(n, ready int64) []corev1.Pod {
		t.Helper()
		var pods []corev1.Pod
		var scale *unstructured.Unstructured
		err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
			all, err := workerPods(ctx, kube, ns)
			if err != nil {
				return false, err
			}
			pods = slices.DeleteFunc(all, func(p corev1.Pod) bool { return p.Name == "foreign" })
			if int64(len(pods)) != n || len(all) != len(pods)+1 {
				return false, nil
			}
			if scale, err = workers.Get(ctx, "w", metav1.GetOptions{}, "scale"); err != nil {
				return false, err
			}
			replicas, _, _ := unstructured.NestedInt64(scale.Object, "status", "replicas")
			selector, _, _ := unstructured.NestedString(scale.Object, "status", "selector")
			wk, err := workers.Get(ctx, "w", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			readyReplicas, _, _ := unstructured.NestedInt64(wk.Object, "status", "readyReplicas")
			return replicas == n && readyReplicas == ready && selector == "app=w,tier=x", nil
		})
		if err != nil {
			t.Fatalf("want %d pods, %d ready: %v; pods %v, scale %v\ncontroller log:\n%s", n, ready, err, names(pods), scale, logs.String())
		}
		return pods
	}
	scaleTo := func(n int64) {
		t.Helper()
		s, err := workers.Get(ctx, "w", metav1.GetOptions{}, "scale")
		if err != nil {
			t.Fatal(err)
		}
		if err := unstructured.SetNestedField(s.Object, n, "spec", "replicas"); err != nil {
			t.Fatal(err)
		}
		if _, err := workers.Update(ctx, s, metav1.UpdateOptions{}, "scale"); err != nil {
			t.Fatalf("scale to %d: %v", n, err)
		}
	}

	first := want(1, 0)[0]
	wantPod := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, GenerateName: "w-", Labels: tmpl.Labels, Annotations: tmpl.Annotations,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "example.com/v1", Kind: "Worker", Name: "w", UID: w.GetUID(), Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
		},
		Spec: tmpl.Spec,
	}
	got := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: first.Namespace, GenerateName: first.GenerateName, Labels: first.Labels, Annotations: first.Annotations, OwnerReferences: first.OwnerReferences},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: first.Spec.Containers[0].Name, Image: first.Spec.Containers[0].Image, Args: first.Spec.Containers[0].Args}}}}
	if diff := cmp.Diff(wantPod, got); diff != "" {
		t.Errorf("the Worker's pod (-want +got):\n%s", diff)
	}
	if !strings.HasPrefix(first.Name, "w-") {
		t.Errorf("pod name %q, want generated from w-", first.Name)
	}

	// Ready as the kubelet would say it: readyReplicas follows.
	first.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	if _, err := kube.CoreV1().Pods(ns).UpdateStatus(ctx, &first, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	want(1, 1)

	// Up one at a time, a second apart (creation times have a second's
	// resolution), so that the pods' ages differ.
	time.Sleep(1100 * time.Millisecond)
	scaleTo(2)
	second := want(2, 1)[1]
	time.Sleep(1100 * time.Millisecond)
	scaleTo(3)
	third := want(3, 1)[2]

	// Down to 1: the newest go, the first (and ready) pod stays.
	scaleTo(1)
	left := want(1, 1)
	if left[0].UID != first.UID {
		t.Errorf("after scaling 3 → 1, pod %s is left, want the oldest, %s (the newest, %s and %s, deleted first)", left[0].Name, first.Name, third.Name, second.Name)
	}

	// A deleted pod is replaced.
	if err := kube.CoreV1().Pods(ns).Delete(ctx, first.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if replaced := want(1, 0)[0]; replaced.UID == first.UID {
		t.Errorf("pod %s was not replaced", first.Name)
	}

	// To zero, as KEDA takes an idle app there.
	scaleTo(0)
	want(0, 0)
	if !slices.ContainsFunc(logs.lines(), func(l string) bool { return strings.Contains(l, "deleted pod") }) {
		t.Errorf("the controller logged no deletion:\n%s", logs.String())
	}

	// A Worker deleted: its pods are the garbage collector's (none here),
	// and the controller makes no new ones.
	scaleTo(2)
	want(2, 0)
	if err := workers.Delete(ctx, "w", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if pods, err := workerPods(ctx, kube, ns); err != nil || len(pods) != 3 {
		t.Errorf("after the Worker was deleted: %v, %v; want its 2 pods and the foreign one, no more", names(pods), err)
	}

	stop()
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the controller did not stop within 10 s of its context's end")
	}
}

// TestControllerRefusesBadSpec: a Worker whose selector does not match its
// template gets no pods, and the controller says why.
func TestControllerRefusesBadSpec(t *testing.T) {
	cfg := apiServer(t)
	ctx := t.Context()
	kube := kubernetes.NewForConfigOrDie(cfg)
	dyn := dynamic.NewForConfigOrDie(cfg)
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "w"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var logs logLines
	if _, err := Start(ctx, cfg, logs.logf); err != nil {
		t.Fatal(err)
	}
	w, err := New("w", "bad", 2, corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "w"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:1"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(w.Object, "other", "spec", "selector", "matchLabels", "app"); err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(GVR).Namespace("w").Create(ctx, w, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const why = `spec.selector "app=other" does not match the template's labels`
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return strings.Contains(logs.String(), why), nil
	}); err != nil {
		t.Fatalf("the controller did not say %q: %v\n%s", why, err, logs.String())
	}
	pods, err := kube.CoreV1().Pods("w").List(ctx, metav1.ListOptions{})
	if err != nil || len(pods.Items) != 0 {
		t.Errorf("pods of a Worker whose selector does not match its template: %d, %v; want none", len(pods.Items), err)
	}
}

func TestNewestFirst(t *testing.T) {
	at := func(s int) metav1.Time { return metav1.NewTime(time.Unix(int64(1000+s), 0)) }
	pods := []corev1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Name: "w-a", CreationTimestamp: at(1)}},
		{ObjectMeta: metav1.ObjectMeta{Name: "w-c", CreationTimestamp: at(3)}},
		{ObjectMeta: metav1.ObjectMeta{Name: "w-b", CreationTimestamp: at(3)}},
		{ObjectMeta: metav1.ObjectMeta{Name: "w-d", CreationTimestamp: at(2)}},
	}
	newestFirst(pods)
	if diff := cmp.Diff([]string{"w-c", "w-b", "w-d", "w-a"}, names(pods)); diff != "" {
		t.Errorf("deletion order (-want +got):\n%s", diff)
	}
}

func TestLivePods(t *testing.T) {
	own := types.UID("own")
	ref := func(uid types.UID, controller bool) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: "example.com/v1", Kind: "Worker", Name: "w", UID: uid, Controller: &controller}}
	}
	now := metav1.Now()
	pods := []corev1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Name: "mine", OwnerReferences: ref(own, true)}, Status: corev1.PodStatus{Phase: corev1.PodRunning}},
		{ObjectMeta: metav1.ObjectMeta{Name: "pending", OwnerReferences: ref(own, true)}},
		{ObjectMeta: metav1.ObjectMeta{Name: "other-worker", OwnerReferences: ref("other", true)}},
		{ObjectMeta: metav1.ObjectMeta{Name: "not-controller", OwnerReferences: ref(own, false)}},
		{ObjectMeta: metav1.ObjectMeta{Name: "orphan"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "deleting", OwnerReferences: ref(own, true), DeletionTimestamp: &now}},
		{ObjectMeta: metav1.ObjectMeta{Name: "succeeded", OwnerReferences: ref(own, true)}, Status: corev1.PodStatus{Phase: corev1.PodSucceeded}},
		{ObjectMeta: metav1.ObjectMeta{Name: "failed", OwnerReferences: ref(own, true)}, Status: corev1.PodStatus{Phase: corev1.PodFailed}},
	}
	if diff := cmp.Diff([]string{"mine", "pending"}, names(livePods(pods, own))); diff != "" {
		t.Errorf("live pods (-want +got):\n%s", diff)
	}
}

func names(pods []corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name)
	}
	return out
}

// logLines collects a controller's log lines, safe for concurrent use.
type logLines struct {
	mu sync.Mutex
	l  []string
}

func (l *logLines) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.l = append(l.l, fmt.Sprintf(format, args...))
}

func (l *logLines) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.l)
}

func (l *logLines) String() string { return strings.Join(l.lines(), "\n") }
