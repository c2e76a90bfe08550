package install

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/ebb-dev/ebb/test/cluster"
)

// AppAtZero is an app deployed for ebb and scaled to zero by KEDA, with the
// activator's hand-off slice routed by kube-proxy.
type AppAtZero struct {
	Namespace, Name string
	// Host is the host the app's requests carry (its ebb hosts annotation).
	Host string
	// URL is the app Service's ClusterIP.
	URL string
	// Service is the app's Service when it is not named as the app (a
	// StatefulSet's, beside its headless governing Service).
	Service string
	// StartedAtOne tells that the Deployment had to be created at 1 replica
	// and left for KEDA to scale to 0, because no AppRoute appeared for it
	// at 0 replicas.
	StartedAtOne bool
}

// DeployAtZero opts namespace ns in, creates the app's Service, its
// Deployment at 0 replicas and its ScaledObject, and returns once the app
// is at zero with its AppRoute, KEDA reaches the scaler, the hand-off slice
// is published and kube-proxy routes the ClusterIP to the activator. If no
// AppRoute appears for the Deployment at 0 within 15 s, it scales it to 1
// and lets KEDA bring it back to 0 (AppAtZero.StartedAtOne).
func (r *Release) DeployAtZero(ctx context.Context, c *cluster.Cluster, ns, name string, s Scaling, logf func(string, ...any)) (*AppAtZero, error) {
	return r.DeployAtZeroWith(ctx, c, ns, name, s, nil, logf)
}

// DeployAtZeroWith is DeployAtZero with the app's Deployment changed by
// edit (when not nil) before it is created: annotations of its pod
// template, its environment.
func (r *Release) DeployAtZeroWith(ctx context.Context, c *cluster.Cluster, ns, name string, s Scaling, edit func(*appsv1.Deployment), logf func(string, ...any)) (*AppAtZero, error) {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	a := &AppAtZero{Namespace: ns, Name: name, Host: name + ".example.com"}
	if err := c.EnsureNamespace(ctx, ns, r.OptIn()); err != nil {
		return nil, err
	}
	svc, err := c.Client.CoreV1().Services(ns).Create(ctx, r.Service(ns, name), metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create service: %w", err)
	}
	a.URL = "http://" + svc.Spec.ClusterIP + "/"
	d := r.App(ns, name, a.Host, 0)
	if edit != nil {
		edit(d)
	}
	if _, err := c.Client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("create deployment: %w", err)
	}
	logf("deployed %s/%s at 0 replicas (hosts %s) behind Service %s", ns, name, a.Host, svc.Spec.ClusterIP)
	if err := r.waitAppRoute(ctx, c, ns, name, 15*time.Second); err != nil {
		logf("no AppRoute for %s/%s at 0 replicas (%v): scaling it to 1 so the webhook sees a pod, KEDA will take it back to 0", ns, name, err)
		a.StartedAtOne = true
		if err := Scale(ctx, c, ns, name, 1); err != nil {
			return nil, err
		}
		if err := r.waitAppRoute(ctx, c, ns, name, 60*time.Second); err != nil {
			return nil, fmt.Errorf("%w\n%s", err, DescribePods(ctx, c, ns))
		}
	}
	logf("AppRoute %s/%s created by the webhook", ns, name)
	if err := c.CreateScaledObject(ctx, r.ScaledObject(ns, name, s)); err != nil {
		return nil, err
	}
	logf("ScaledObject %s/%s Ready: KEDA reaches the scaler at %s", ns, name, r.ScalerAddress)
	if err := r.WaitAtZero(ctx, c, a, 2*time.Minute); err != nil {
		return nil, err
	}
	return a, nil
}

// Scale sets a Deployment's replicas, again on a conflict (its controller
// writes the status between the read and the write).
func Scale(ctx context.Context, c *cluster.Cluster, ns, name string, n int32) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s, err := c.Client.AppsV1().Deployments(ns).GetScale(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		s.Spec.Replicas = n
		_, err = c.Client.AppsV1().Deployments(ns).UpdateScale(ctx, name, s, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("scale %s/%s to %d: %w", ns, name, n, err)
	}
	return nil
}

func (r *Release) waitAppRoute(ctx context.Context, c *cluster.Cluster, ns, name string, timeout time.Duration) error {
	return cluster.WaitFor(ctx, timeout, "AppRoute "+ns+"/"+name, func(ctx context.Context) (bool, error) {
		_, err := r.AppRoute(ctx, c, ns, name)
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
}

// WaitAtZero waits until KEDA has set the app's replicas to 0, its pods are
// gone, the activator's hand-off slice is published and kube-proxy routes
// the ClusterIP to the activator.
func (r *Release) WaitAtZero(ctx context.Context, c *cluster.Cluster, a *AppAtZero, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	if err := c.WaitReplicas(ctx, a.Namespace, a.Name, 0, timeout); err != nil {
		return err
	}
	return r.waitPodsGoneAndHandedOff(ctx, c, a, deadline)
}

// waitPodsGoneAndHandedOff is the end of WaitAtZero once the app's
// workload is at 0 replicas, whatever its kind: its pods are gone, the
// hand-off slice is published and kube-proxy routes to the activator.
func (r *Release) waitPodsGoneAndHandedOff(ctx context.Context, c *cluster.Cluster, a *AppAtZero, deadline time.Time) error {
	if err := cluster.WaitFor(ctx, time.Until(deadline), "the pods of "+a.Name+" gone", func(ctx context.Context) (bool, error) {
		pods, err := c.Client.CoreV1().Pods(a.Namespace).List(ctx, metav1.ListOptions{LabelSelector: r.Names.AppLabel() + "=" + a.Name})
		return err == nil && len(pods.Items) == 0, err
	}); err != nil {
		return err
	}
	svc := cmp.Or(a.Service, a.Name)
	if err := cluster.WaitFor(ctx, time.Until(deadline), "the hand-off EndpointSlice of "+a.Name+" (Service "+svc+")", func(ctx context.Context) (bool, error) {
		n, err := r.HandOffEndpoints(ctx, c, a.Namespace, svc)
		return n > 0, err
	}); err != nil {
		return err
	}
	return WaitRoutedToActivator(ctx, a.URL, time.Until(deadline))
}

// WaitRoutedToActivator waits until the ClusterIP answers a request for a
// host no app has with the activator's 404, which wakes nothing: kube-proxy
// routes the Service to the hand-off endpoints.
func WaitRoutedToActivator(ctx context.Context, url string, timeout time.Duration) error {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	var last string
	err := cluster.WaitFor(ctx, timeout, "kube-proxy to route "+url+" to the activator", func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		req.Host = "no-such-app.invalid"
		resp, err := client.Do(req)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		last = resp.Status + ": " + strings.TrimSpace(string(b))
		return resp.StatusCode == http.StatusNotFound, nil
	})
	if err != nil {
		return fmt.Errorf("%w (last answer: %s)", err, last)
	}
	return nil
}

// Result is one request's outcome.
type Result struct {
	Status int
	Body   string
	Err    error
	Sent   time.Time
	Took   time.Duration
}

// Send sends n concurrent GET requests for host to url, each with its own
// connection and the timeout, and returns their results in order.
func Send(ctx context.Context, url, host string, n int, timeout time.Duration) []Result {
	client := &http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true, MaxIdleConnsPerHost: -1}}
	out := make([]Result, n)
	done := make(chan struct{}, n)
	for i := range n {
		go func() {
			defer func() { done <- struct{}{} }()
			out[i] = Get(ctx, client, url, host)
		}()
	}
	for range n {
		<-done
	}
	return out
}

// Get sends one GET for host to url.
func Get(ctx context.Context, client *http.Client, url, host string) Result {
	r := Result{Sent: time.Now()}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		r.Err = err
		return r
	}
	req.Host = host
	resp, err := client.Do(req)
	if err != nil {
		r.Err, r.Took = err, time.Since(r.Sent)
		return r
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	r.Status, r.Body, r.Err, r.Took = resp.StatusCode, strings.TrimSpace(string(b)), err, time.Since(r.Sent)
	return r
}

// Failures summarises the results that are not 200 by cause, nil if none.
func Failures(results []Result) error {
	counts := map[string]int{}
	var order []string
	for _, r := range results {
		var what string
		switch {
		case r.Err != nil:
			what = r.Err.Error()
		case r.Status != http.StatusOK:
			what = fmt.Sprintf("%d %s", r.Status, r.Body)
		default:
			continue
		}
		if counts[what] == 0 {
			order = append(order, what)
		}
		counts[what]++
	}
	var errs []error
	for _, what := range order {
		errs = append(errs, fmt.Errorf("%d× %s", counts[what], what))
	}
	return errors.Join(errs...)
}

// PodsOf lists the app's pods.
func (r *Release) PodsOf(ctx context.Context, c *cluster.Cluster, ns, app string) ([]corev1.Pod, error) {
	pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: r.Names.AppLabel() + "=" + app})
	if err != nil {
		return nil, err
	}
	return pods.Items, nil
}
