// Command demo is what `make demo` runs: it brings up the local cluster
// (real kube-apiserver, etcd, kube-controller-manager, kube-proxy, KEDA and
// ebb's node agent), deploys the test app behind a Service, sends it
// requests through the Service's ClusterIP, scales it to zero and shows the
// pods gone, then tears everything down. With --keep it leaves the cluster
// running and prints how to reach it with kubectl.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/ebb-dev/ebb/test/cluster"
)

func main() {
	keep := flag.Bool("keep", false, "leave the cluster running until Ctrl-C and print how to reach it")
	requests := flag.Int("requests", 20, "requests to send through the Service")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *keep, *requests); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func say(format string, args ...any) {
	fmt.Printf("%s  %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

func run(ctx context.Context, keep bool, requests int) error {
	say("starting the local cluster (etcd, kube-apiserver, kube-controller-manager, kube-proxy, KEDA, node agent)")
	c, err := cluster.Start(ctx, cluster.Options{KEDA: true, Logf: say})
	if err != nil {
		return err
	}
	defer func() {
		say("tearing the cluster down")
		c.Stop()
	}()
	const ns, name = "demo", "hello"
	if err := c.EnsureNamespace(ctx, ns, nil); err != nil {
		return err
	}
	labels := map[string]string{"app": name}
	deploy := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(2)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To(int64(5)),
					Containers: []corev1.Container{{
						Name: "app", Image: "ghcr.io/ebb-dev/ebb-test-app:dev",
						Env:   []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
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
	begin := time.Now()
	if _, err := c.Client.AppsV1().Deployments(ns).Create(ctx, deploy, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create deployment: %w", err)
	}
	svc, err := c.Client.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}}},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create service: %w", err)
	}
	say("deployed %s/%s (2 replicas of the test app) behind Service ClusterIP %s", ns, name, svc.Spec.ClusterIP)
	if err := cluster.WaitFor(ctx, 60*time.Second, "2 ready endpoints", func(ctx context.Context) (bool, error) {
		n, err := c.ReadyEndpoints(ctx, ns, name)
		return n == 2, err
	}); err != nil {
		return err
	}
	say("2 pods ready in %s", time.Since(begin).Round(time.Millisecond))

	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	ready := time.Now()
	if err := cluster.WaitFor(ctx, 30*time.Second, "kube-proxy to route the ClusterIP", func(context.Context) (bool, error) {
		resp, err := client.Get("http://" + svc.Spec.ClusterIP + "/")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	}); err != nil {
		return err
	}
	say("kube-proxy routes the ClusterIP %s after the endpoints were ready", time.Since(ready).Round(time.Millisecond))
	answers := map[string]int{}
	var latencies []time.Duration
	failures := 0
	for range requests {
		t0 := time.Now()
		resp, err := client.Get("http://" + svc.Spec.ClusterIP + "/")
		if err != nil {
			failures++
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		latencies = append(latencies, time.Since(t0))
		if resp.StatusCode != http.StatusOK {
			failures++
			continue
		}
		answers[strings.TrimSpace(string(body))]++
	}
	say("sent %d requests to http://%s/ through kube-proxy", requests, svc.Spec.ClusterIP)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\n  answered by\trequests")
	for a, n := range answers {
		fmt.Fprintf(tw, "  %s\t%d\n", a, n)
	}
	fmt.Fprintf(tw, "  (failed)\t%d\n", failures)
	tw.Flush()
	if len(latencies) > 0 {
		sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
		say("latency p50 %s, max %s", latencies[len(latencies)/2].Round(time.Microsecond), latencies[len(latencies)-1].Round(time.Microsecond))
	}
	if failures > 0 {
		return fmt.Errorf("%d of %d requests failed", failures, requests)
	}

	if keep {
		say("the cluster stays up until Ctrl-C. Try:\n\n  export KUBECONFIG=%s\n  kubectl get pods,svc,endpointslices -n %s\n  curl http://%s/\n", c.Kubeconfig, ns, svc.Spec.ClusterIP)
		<-ctx.Done()
		return nil
	}

	say("scaling %s to 0", name)
	scale, err := c.Client.AppsV1().Deployments(ns).GetScale(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get scale: %w", err)
	}
	scale.Spec.Replicas = 0
	begin = time.Now()
	if _, err := c.Client.AppsV1().Deployments(ns).UpdateScale(ctx, name, scale, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("scale to 0: %w", err)
	}
	if err := cluster.WaitFor(ctx, 30*time.Second, "pods gone", func(ctx context.Context) (bool, error) {
		pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		return err == nil && len(pods.Items) == 0, err
	}); err != nil {
		return err
	}
	say("at zero: pods stopped and their network namespaces removed in %s", time.Since(begin).Round(time.Millisecond))
	if _, err := client.Get("http://" + svc.Spec.ClusterIP + "/"); err == nil {
		return errors.New("the Service still answered at zero replicas")
	}
	say("a request now finds no pod (ebb's activator will hold it and wake the app: see the README)")
	return nil
}
