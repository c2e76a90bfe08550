package cluster_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ebb-dev/ebb/test/cluster"
)

// TestPodUsesInClusterConfig shows what in-cluster clients (ebb's own
// components, run as the chart's pods) rely on: a pod gets its
// service-account token and the cluster CA at the standard path, reaches the
// API server through the kubernetes Service's ClusterIP, and a pod with
// restartPolicy Never that exits 0 ends Succeeded.
func TestPodUsesInClusterConfig(t *testing.T) {
	ctx := t.Context()
	const ns = "foundation-incluster"
	createNamespace(t, ns)
	shFixture(t)
	const sa = "/var/run/secrets/kubernetes.io/serviceaccount"
	script := `curl -sS --fail --max-time 5 --cacert ` + sa + `/ca.crt -H "Authorization: Bearer $(cat ` + sa + `/token)" ` +
		`"https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT/api/v1/namespaces/$(cat ` + sa + `/namespace)/serviceaccounts/default"`
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "whoami", Namespace: ns},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "sh", Image: "sh", Command: []string{"sh", "-c", script}}},
		},
	}
	waitSA(t, ns)
	// RBAC: the pod's own identity may read its ServiceAccount.
	if _, err := lc.Client.RbacV1().RoleBindings(ns).Create(ctx, roleBindingViewForDefaultSA(ns), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := lc.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var phase corev1.PodPhase
	if err := cluster.WaitFor(ctx, 30*time.Second, "pod to finish", func(ctx context.Context) (bool, error) {
		p, err := lc.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		phase = p.Status.Phase
		return phase == corev1.PodSucceeded || phase == corev1.PodFailed, nil
	}); err != nil {
		t.Fatal(err)
	}
	log, _ := os.ReadFile(filepath.Join(lc.Dir, "logs", "pods", ns+"_whoami_sh.log"))
	if phase != corev1.PodSucceeded {
		t.Fatalf("pod phase %s; its output:\n%s", phase, log)
	}
	if !strings.Contains(string(log), `"name": "default"`) && !strings.Contains(string(log), `"name":"default"`) {
		t.Errorf("the API server's answer does not name the ServiceAccount:\n%s", log)
	}
}
