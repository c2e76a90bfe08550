package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/ebb-dev/ebb/test/cluster"
	"github.com/ebb-dev/ebb/test/e2e/install"
	"github.com/ebb-dev/ebb/webhook/inject"
)

// TestRestrictedAsTheNodeRunsIt checks, on the node, what Pod Security
// "restricted" admission only checks on paper: every process of ebb's pods
// and of an app pod's injected sidecar runs as uid/gid 65532 with no
// effective capability on a read-only root filesystem, in cgroups that
// carry its container's memory limit and CPU request (and no CPU quota,
// as the chart sets no CPU limit); and both namespaces refuse a privileged
// pod.
func TestRestrictedAsTheNodeRunsIt(t *testing.T) {
	ctx := t.Context()
	a := deployAtZero(t, "e2e-restricted", "locked")
	if r := install.Get(ctx, &http.Client{Timeout: 60 * time.Second}, a.URL, a.Host); r.Err != nil || r.Status != http.StatusOK {
		t.Fatalf("waking the app: %d %v", r.Status, r.Err)
	}
	// The app answered as soon as its sidecar was ready; the kubelet
	// reports the pod Running (with its containers' IDs) a little later.
	if err := cluster.WaitFor(ctx, 30*time.Second, "the app's pod Ready", func(ctx context.Context) (bool, error) {
		list, err := lc.Client.CoreV1().Pods(a.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil || len(list.Items) == 0 {
			return false, err
		}
		for _, c := range list.Items[0].Status.Conditions {
			if c.Type == corev1.PodReady {
				return c.Status == corev1.ConditionTrue, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatal(err)
	}
	var pods []corev1.Pod
	for _, ns := range []string{ebb.Namespace, a.Namespace} {
		list, err := lc.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pods = append(pods, list.Items...)
	}
	checked := map[string]int{}
	for _, pod := range pods {
		if pod.Status.Phase != corev1.PodRunning || pod.DeletionTimestamp != nil {
			continue
		}
		procs, err := cluster.PodProcesses(&pod)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range procs {
			ctr, ok := containerOf(pod, p.ContainerID)
			if !ok {
				if !strings.HasSuffix(p.Command, "/pause") {
					t.Errorf("%s: process %d (%s) is neither a container's nor the sandbox's", pod.Name, p.PID, p.Command)
				}
				continue
			}
			if ctr.Name == "app" {
				continue // the test app: the user's container, not ebb's
			}
			checked[ctr.Name]++
			if p.UID != 65532 || p.GID != 65532 {
				t.Errorf("%s/%s: runs as %d:%d, want 65532:65532", pod.Name, ctr.Name, p.UID, p.GID)
			}
			if p.CapEff != "0000000000000000" {
				t.Errorf("%s/%s: effective capabilities %s, want none", pod.Name, ctr.Name, p.CapEff)
			}
			if !p.ReadOnlyRoot {
				t.Errorf("%s/%s: root filesystem is writable", pod.Name, ctr.Name)
			}
			// The chart gives every ebb container a memory limit and a CPU
			// request, and no CPU limit.
			mem, cpu := ctr.Resources.Limits.Memory(), ctr.Resources.Requests.Cpu()
			if mem.IsZero() || cpu.IsZero() || !ctr.Resources.Limits.Cpu().IsZero() {
				t.Errorf("%s/%s: resources %+v, want the chart's memory limit and CPU request, no CPU limit", pod.Name, ctr.Name, ctr.Resources)
				continue
			}
			if p.MemoryLimit != mem.Value() {
				t.Errorf("%s/%s: memory cgroup limit %d, want the container's limit %d", pod.Name, ctr.Name, p.MemoryLimit, mem.Value())
			}
			if p.CPUShares != cpu.MilliValue()*1024/1000 {
				t.Errorf("%s/%s: cpu.shares %d, want %d for a request of %s", pod.Name, ctr.Name, p.CPUShares, cpu.MilliValue()*1024/1000, cpu)
			}
			if p.CPUQuota != -1 || p.CPUShares < 0 {
				t.Errorf("%s/%s: CFS quota %d µs (cpu cgroup read: %v), want none (no CPU limit)", pod.Name, ctr.Name, p.CPUQuota, p.CPUShares >= 0)
			}
		}
	}
	t.Logf("processes checked per container: %v", checked)
	// And the namespaces enforce the profile: a privileged pod is refused.
	for _, ns := range []string{ebb.Namespace, a.Namespace} {
		bad := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "privileged", Namespace: ns},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "c", Image: "ghcr.io/ebb-dev/ebb-test-app:dev",
				SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)},
			}}},
		}
		_, err := lc.Client.CoreV1().Pods(ns).Create(ctx, bad, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "restricted") {
			t.Errorf("privileged pod in %s: %v, want Forbidden by Pod Security restricted", ns, err)
		}
	}
	for _, want := range []string{"webhook", "activator", "scaler", inject.ContainerName} {
		if checked[want] == 0 {
			t.Errorf("no running process of container %q was found to check", want)
		}
	}
}

// containerOf is the container (or init container) of pod with the
// runtime's container ID id.
func containerOf(pod corev1.Pod, id string) (corev1.Container, bool) {
	statuses := append(append([]corev1.ContainerStatus{}, pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...)
	for _, st := range statuses {
		if !strings.HasSuffix(st.ContainerID, "://"+id) {
			continue
		}
		for _, c := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
			if c.Name == st.Name {
				return c, true
			}
		}
	}
	return corev1.Container{}, false
}
