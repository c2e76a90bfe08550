package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// Exec runs argv, a program of this machine, inside the pod's network
// namespace with the pod's own resolv.conf, and returns its standard
// output.
func (c *Cluster) Exec(ctx context.Context, pod *corev1.Pod, argv ...string) ([]byte, error) {
	pid, err := PodPID(pod)
	if err != nil {
		return nil, err
	}
	resolv, err := os.ReadFile(fmt.Sprintf("/proc/%d/root/etc/resolv.conf", pid))
	if err != nil {
		return nil, fmt.Errorf("resolv.conf of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	resolvPath := filepath.Join(c.Dir, "node", "resolv-"+string(pod.UID)+".conf")
	if err := os.WriteFile(resolvPath, resolv, 0o644); err != nil {
		return nil, fmt.Errorf("resolv.conf of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	args := append([]string{"--net=/proc/" + strconv.Itoa(pid) + "/ns/net", "--", "unshare", "--mount", "--propagation", "private", "--",
		"/bin/sh", "-c", `mount --bind "$0" /etc/resolv.conf && exec "$@"`, resolvPath}, argv...)
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "nsenter", args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("exec in pod %s/%s %v: %w: %s", pod.Namespace, pod.Name, argv, err, stderr.Bytes())
	}
	return stdout.Bytes(), nil
}

// WaitFor polls cond every 50 ms until it returns true, an error, or
// timeout passes; the error names what was awaited and the last state.
func WaitFor(ctx context.Context, timeout time.Duration, what string, cond func(context.Context) (bool, error)) error {
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true, cond); err != nil {
		return fmt.Errorf("wait for %s: %w", what, err)
	}
	return nil
}

// ReadyEndpoints counts the ready endpoints of every EndpointSlice of a
// Service, whoever manages the slice.
func (c *Cluster) ReadyEndpoints(ctx context.Context, namespace, service string) (int, error) {
	slices, err := c.Client.DiscoveryV1().EndpointSlices(namespace).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + service})
	if err != nil {
		return 0, fmt.Errorf("list endpoint slices of %s/%s: %w", namespace, service, err)
	}
	n := 0
	for _, s := range slices.Items {
		for _, e := range s.Endpoints {
			if e.Conditions.Ready == nil || *e.Conditions.Ready {
				n++
			}
		}
	}
	return n, nil
}

// WaitReplicas waits, on a watch, until the Deployment's spec.replicas is
// want: what KEDA or an HPA set, seen the moment it is written.
func (c *Cluster) WaitReplicas(ctx context.Context, ns, name string, want int32, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	lw := cache.NewListWatchFromClient(c.Client.AppsV1().RESTClient(), "deployments", ns, fields.OneTermEqualSelector("metadata.name", name))
	_, err := watchtools.UntilWithSync(ctx, lw, &appsv1.Deployment{}, nil, func(ev watch.Event) (bool, error) {
		d, ok := ev.Object.(*appsv1.Deployment)
		return ok && d.Spec.Replicas != nil && *d.Spec.Replicas == want, nil
	})
	if err != nil {
		return fmt.Errorf("deployment %s/%s did not reach replicas=%d within %s: %w", ns, name, want, timeout, err)
	}
	return nil
}

// StopAPIServer stops the cluster's API server: what runs in the cluster
// keeps running, and nothing reaches it through the API until
// StartAPIServer.
func (c *Cluster) StopAPIServer() {
	c.procs["kube-apiserver"].stop(5 * time.Second)
}

// StartAPIServer starts the API server again with the arguments it first
// had (its log: kube-apiserver-again.log) and waits until it is ready.
func (c *Cluster) StartAPIServer(ctx context.Context) error {
	old := c.procs["kube-apiserver"]
	if done, _ := old.exited(); !done {
		return errors.New("the API server runs")
	}
	p, err := startProcess(filepath.Join(c.Dir, "logs"), "kube-apiserver-again", nil, old.cmd.Path, old.cmd.Args[1:]...)
	if err != nil {
		return err
	}
	c.procs["kube-apiserver"] = p
	return c.poll(ctx, p, 60*time.Second, "kube-apiserver /readyz", func() error {
		return c.Client.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).Error()
	})
}
