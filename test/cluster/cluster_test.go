package cluster_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/ebb-dev/ebb/test/cluster"
)

// testAppDeployment is a Deployment of bin/ebb-test-app whose port is named
// "http" and whose readiness probe uses that name.
func testAppDeployment(ns, name string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To(int64(5)),
					Containers: []corev1.Container{{
						Name:  "app",
						Image: "ghcr.io/ebb-dev/ebb-test-app:dev",
						Args:  []string{"--listen=:8080"},
						Env: []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{
							FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"},
						}}},
						Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
						ReadinessProbe: &corev1.Probe{
							ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http")}},
							PeriodSeconds: 1,
						},
					}},
				},
			},
		},
	}
}

func service(ns, name string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": name},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}},
		},
	}
}

func createNamespace(t *testing.T, name string) {
	t.Helper()
	if err := lc.EnsureNamespace(t.Context(), name, nil); err != nil {
		t.Fatal(err)
	}
}

// freshConn opens a new connection per request, so that kube-proxy picks a
// backend for each.
var freshConn = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// get answers the body of a 200 response or an error.
func get(ctx context.Context, url string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := freshConn.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return string(b), fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(b), nil
}

func podsOf(t *testing.T, ns, app string) []corev1.Pod {
	t.Helper()
	pods, err := lc.Client.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "app=" + app})
	if err != nil {
		t.Fatal(err)
	}
	return pods.Items
}

// TestDeploymentServesThroughService is the foundation's first proof: the
// real controller manager makes the pods, kube-scheduler binds them, the
// kubelet runs them from their images through containerd in their own
// network namespaces, the real EndpointSlice controller lists them, the
// real kube-proxy routes the ClusterIP, and CoreDNS answers Service names
// inside pods.
func TestDeploymentServesThroughService(t *testing.T) {
	ctx := t.Context()
	const ns, name = "foundation-web", "web"
	createNamespace(t, ns)
	deploy, err := lc.Client.AppsV1().Deployments(ns).Create(ctx, testAppDeployment(ns, name, 2), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := lc.Client.CoreV1().Services(ns).Create(ctx, service(ns, name), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	if err := cluster.WaitFor(ctx, 60*time.Second, "2 ready endpoints", func(ctx context.Context) (bool, error) {
		n, err := lc.ReadyEndpoints(ctx, ns, name)
		return n == 2, err
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("Deployment created → 2 ready endpoints in %s", time.Since(begin).Round(time.Millisecond))
	// The kubelet's word on the image: pulled from the cluster's registry
	// (and how long it took), or already present.
	events, err := lc.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=Pulled"})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		t.Logf("kubelet: %s", e.Message)
	}

	pods := podsOf(t, ns, name)
	if len(pods) != 2 {
		t.Fatalf("got %d pods, want 2", len(pods))
	}
	seen := map[string]bool{}
	url := "http://" + svc.Spec.ClusterIP + "/"
	if err := cluster.WaitFor(ctx, 20*time.Second, "both pods answering through the ClusterIP", func(ctx context.Context) (bool, error) {
		body, err := get(ctx, url)
		if err == nil {
			seen[strings.TrimSpace(body)] = true
		}
		return len(seen) == 2, nil
	}); err != nil {
		t.Fatalf("%v; answers seen: %v", err, seen)
	}
	for _, p := range pods {
		if want := "hello from " + p.Name; !seen[want] {
			t.Errorf("no answer %q through %s; seen %v", want, url, seen)
		}
	}

	// From inside another pod, by the Service's DNS names.
	if _, err := lc.Client.AppsV1().Deployments(ns).Create(ctx, testAppDeployment(ns, "client", 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cluster.WaitFor(ctx, 60*time.Second, "client pod ready", func(ctx context.Context) (bool, error) {
		n, err := lc.ReadyEndpoints(ctx, ns, "client")
		return n == 1 || len(podsOf(t, ns, "client")) == 1 && podReady(podsOf(t, ns, "client")[0]), err
	}); err != nil {
		t.Fatal(err)
	}
	client := podsOf(t, ns, "client")[0]
	for _, host := range []string{name, name + "." + ns, name + "." + ns + ".svc", name + "." + ns + ".svc.cluster.local"} {
		out, err := lc.Exec(ctx, &client, "curl", "-sS", "--fail", "--max-time", "5", "http://"+host+"/")
		if err != nil {
			t.Errorf("from pod %s: %v", client.Name, err)
			continue
		}
		if !strings.HasPrefix(string(out), "hello from "+name+"-") {
			t.Errorf("from pod %s, GET http://%s/ = %q", client.Name, host, out)
		}
	}

	// Scaling to 0 stops every process of both pods.
	for _, p := range pods {
		if _, err := cluster.PodPID(&p); err != nil {
			t.Fatal(err)
		}
	}
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		scale, err := lc.Client.AppsV1().Deployments(ns).GetScale(ctx, deploy.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		scale.Spec.Replicas = 0
		_, err = lc.Client.AppsV1().Deployments(ns).UpdateScale(ctx, deploy.Name, scale, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := cluster.WaitFor(ctx, 30*time.Second, "pods gone after scaling to 0", func(context.Context) (bool, error) {
		return len(podsOf(t, ns, name)) == 0, nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		if pid, err := cluster.PodPID(&p); err == nil {
			t.Errorf("deleted pod %s still has process %d", p.Name, pid)
		}
		if _, err := get(ctx, "http://"+p.Status.PodIP+":8080/"); err == nil {
			t.Errorf("deleted pod %s still answers at %s", p.Name, p.Status.PodIP)
		}
	}
}

func podReady(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
