package killed

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

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

	// From a clean machine (what an earlier killed run left goes first).
	if err := cluster.RemoveLeftovers(); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive this test
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
	if err := cluster.RemoveLeftovers(); err != nil {
		t.Error(err)
	}
	t.Logf("clean-up took %s", time.Since(begin).Round(time.Millisecond))
	// Seen by this test's own eyes, not the package's: the machine is as
	// it was before the cluster started.
	if diff := cmp.Diff(before, snapshot(t)); diff != "" {
		t.Errorf("the machine after clean-up differs from before the run (-before +after):\n%s", diff)
	}
}

// machine is what a local cluster may change on the machine.
type machine struct {
	Mounts, Links, Shm, Cgroups, NetNS []string
	Sysctls                            map[string]string
	NFTables                           string
}

func snapshot(t *testing.T) machine {
	t.Helper()
	m := machine{Sysctls: map[string]string{}}
	info, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(info), "\n") {
		if f := strings.Fields(line); len(f) > 4 {
			m.Mounts = append(m.Mounts, f[4])
		}
	}
	m.Links = names(t, "/sys/class/net/*")
	m.Shm = names(t, "/dev/shm/*")
	m.Cgroups = names(t, "/sys/fs/cgroup/*/*/")
	m.NetNS = names(t, "/run/netns/*")
	for _, k := range []string{"net/ipv4/ip_forward", "vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic",
		"kernel/panic_on_oops", "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes"} {
		v, err := os.ReadFile("/proc/sys/" + k)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		m.Sysctls[k] = strings.TrimSpace(string(v))
	}
	out, err := exec.Command("nft", "list", "tables").Output()
	if err != nil {
		t.Fatal(err)
	}
	m.NFTables = string(out)
	slices.Sort(m.Mounts)
	return m
}

func names(t *testing.T, pattern string) []string {
	t.Helper()
	found, err := filepath.Glob(pattern)
	if err != nil {
		t.Fatal(err)
	}
	return found
}
