package cluster_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/ebb-dev/ebb/test/cluster"
)

// shFixture makes the image "sh" run the system shell, for pods whose
// behaviour is a one-line script.
func shFixture(t *testing.T) {
	t.Helper()
	sh := filepath.Join(lc.BinDir, "sh")
	if _, err := os.Lstat(sh); err != nil {
		if err := os.Symlink("/bin/sh", sh); err != nil {
			t.Fatal(err)
		}
	}
}

func shContainer(name, script string) corev1.Container {
	return corev1.Container{Name: name, Image: "sh", Command: []string{"sh", "-c", script}}
}

func getPod(t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	p, err := lc.Client.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPodLifecycle covers what ebb's pods rely on from the node: an init
// container runs to completion before a native sidecar (restartPolicy
// Always) starts alongside the app, the pod is Ready only when both are;
// a crashing container is restarted with back-off; deletion sends SIGTERM
// and kills what ignores it when the grace period ends.
func TestPodLifecycle(t *testing.T) {
	ctx := t.Context()
	const ns = "foundation-lifecycle"
	createNamespace(t, ns)
	shFixture(t)
	waitSA(t, ns)

	t.Run("init, native sidecar, app", func(t *testing.T) {
		sidecar := corev1.Container{
			Name: "side", Image: "ebb-test-app", Args: []string{"--listen=:9000"},
			RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
			ReadinessProbe: &corev1.Probe{
				ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt(9000)}},
				PeriodSeconds: 1,
			},
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "ordered", Namespace: ns},
			Spec: corev1.PodSpec{
				InitContainers: []corev1.Container{shContainer("init", "sleep 0.3"), sidecar},
				Containers: []corev1.Container{{
					Name: "app", Image: "ebb-test-app", Args: []string{"--listen=:8080"},
					ReadinessProbe: &corev1.Probe{
						ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt(8080)}},
						PeriodSeconds: 1,
					},
				}},
			},
		}
		if _, err := lc.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := cluster.WaitFor(ctx, 30*time.Second, "pod ready", func(context.Context) (bool, error) {
			return podReady(*getPod(t, ns, pod.Name)), nil
		}); err != nil {
			t.Fatalf("%v; status: %+v", err, getPod(t, ns, pod.Name).Status)
		}
		p := getPod(t, ns, pod.Name)
		init, side := p.Status.InitContainerStatuses[0], p.Status.InitContainerStatuses[1]
		if init.State.Terminated == nil || init.State.Terminated.ExitCode != 0 {
			t.Errorf("init container state %+v, want terminated with 0", init.State)
		}
		if side.State.Running == nil || !side.Ready {
			t.Errorf("sidecar state %+v ready=%v, want running and ready", side.State, side.Ready)
		}
		if !side.State.Running.StartedAt.After(init.State.Terminated.FinishedAt.Add(-time.Second)) || side.State.Running.StartedAt.Before(&init.State.Terminated.StartedAt) {
			t.Errorf("sidecar started at %s, init ran %s–%s: sidecar must start after init ends", side.State.Running.StartedAt, init.State.Terminated.StartedAt, init.State.Terminated.FinishedAt)
		}
		for _, port := range []string{"8080", "9000"} {
			if _, err := get(ctx, "http://"+p.Status.PodIP+":"+port+"/"); err != nil {
				t.Errorf("port %s of the pod: %v", port, err)
			}
		}
	})

	t.Run("crash restarts with back-off", func(t *testing.T) {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "crasher", Namespace: ns},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{shContainer("c", "exit 3")}},
		}
		if _, err := lc.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var last corev1.ContainerStatus
		if err := cluster.WaitFor(ctx, 30*time.Second, "two restarts", func(context.Context) (bool, error) {
			p := getPod(t, ns, pod.Name)
			if len(p.Status.ContainerStatuses) == 1 {
				last = p.Status.ContainerStatuses[0]
			}
			return last.RestartCount >= 2, nil
		}); err != nil {
			t.Fatalf("%v; last status %+v", err, last)
		}
		if term := last.LastTerminationState.Terminated; term == nil || term.ExitCode != 3 {
			t.Errorf("last termination %+v, want exit code 3", last.LastTerminationState)
		}
	})

	t.Run("SIGTERM then SIGKILL after the grace period", func(t *testing.T) {
		// The shell marks that its trap is set; the readiness probe waits for
		// the mark, so SIGTERM cannot arrive before the trap.
		mark := filepath.Join(t.TempDir(), "trapped")
		ctr := shContainer("c", `trap "" TERM; touch `+mark+`; while true; do sleep 0.1; done`)
		ctr.ReadinessProbe = &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"test", "-e", mark}}},
			PeriodSeconds: 1,
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "stubborn", Namespace: ns},
			Spec: corev1.PodSpec{
				TerminationGracePeriodSeconds: ptr.To(int64(2)),
				Containers:                    []corev1.Container{ctr},
			},
		}
		if _, err := lc.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := cluster.WaitFor(ctx, 30*time.Second, "pod ready (trap set)", func(context.Context) (bool, error) {
			return podReady(*getPod(t, ns, pod.Name)), nil
		}); err != nil {
			t.Fatal(err)
		}
		begin := time.Now()
		if err := lc.Client.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := cluster.WaitFor(ctx, 30*time.Second, "pod gone", func(ctx context.Context) (bool, error) {
			_, err := lc.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
			return err != nil, nil
		}); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(begin); took < 2*time.Second || took > 6*time.Second {
			t.Errorf("a container ignoring SIGTERM was gone after %s, want the 2s grace period (and not much more)", took)
		}
	})
}

func waitSA(t *testing.T, ns string) {
	t.Helper()
	if err := cluster.WaitFor(t.Context(), 30*time.Second, "default service account", func(ctx context.Context) (bool, error) {
		_, err := lc.Client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatal(err)
	}
}
