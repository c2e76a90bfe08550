package killed

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/ebb-dev/ebb/test/cluster"
)

// childEnv makes the test binary the killed run: it starts a cluster
// (the parent holds the machine lock), runs a pod, says "ready" and waits
// to be killed.
const childEnv = "EBB_KILLED_CLUSTER_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		if err := child(); err != nil {
			fmt.Println("child:", err)
			os.Exit(1)
		}
		select {}
	}
	os.Exit(m.Run())
}

func child() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := cluster.Start(ctx, cluster.Options{MachineLocked: true})
	if err != nil {
		return err
	}
	if err := c.EnsureNamespace(ctx, "killed", nil); err != nil {
		return err
	}
	labels := map[string]string{"app": "web"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "killed"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(2)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "ghcr.io/ebb-dev/ebb-test-app:dev"}}},
			},
		},
	}
	if _, err := c.Client.AppsV1().Deployments("killed").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		return err
	}
	if err := cluster.WaitFor(ctx, time.Minute, "2 ready pods", func(ctx context.Context) (bool, error) {
		d, err := c.Client.AppsV1().Deployments("killed").Get(ctx, "web", metav1.GetOptions{})
		return err == nil && d.Status.ReadyReplicas == 2, nil
	}); err != nil {
		return err
	}
	fmt.Println("ready")
	return nil
}

func TestKilledRunLeavesNothingAfterCleanUp(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a local cluster")
	}
	lock, err := cluster.LockMachine(t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Unlock()

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var said []string
	lines := bufio.NewScanner(out)
	for lines.Scan() && lines.Text() != "ready" {
		said = append(said, lines.Text())
	}
	if lines.Text() != "ready" {
		_ = cmd.Wait()
		t.Fatalf("the child cluster did not come up:\n%s", strings.Join(said, "\n"))
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()

	// The control plane dies with the child (Pdeathsig); the pods'
	// containers live on in their shims, with everything the node made.
	left := cluster.Leftovers()
	t.Logf("a killed run left:\n  %s", strings.Join(left, "\n  "))
	for _, want := range []string{"processes in cgroup", "containerd shims", "mount ", "link ebb0", "nftables table ip kube-proxy"} {
		if !strings.Contains(strings.Join(left, "\n"), want) {
			t.Errorf("a killed run left no %q, so this test cannot tell that clean-up removes it", want)
		}
	}

	begin := time.Now()
	cluster.RemoveLeftovers()
	if left := cluster.Leftovers(); len(left) > 0 {
		t.Errorf("after clean-up, still there:\n  %s", strings.Join(left, "\n  "))
	}
	t.Logf("clean-up took %s", time.Since(begin).Round(time.Millisecond))
}
