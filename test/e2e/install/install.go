package install

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/test/cluster"
	"github.com/ebb-dev/ebb/test/repo"
)

// Options name one release of the chart.
type Options struct {
	// Release is the Helm release name; "ebb" if empty.
	Release string
	// Namespace is the release namespace; "ebb-system" if empty.
	Namespace string
	// GroupSuffix names the instance; groupsuffix.Default if empty.
	GroupSuffix string
	// Set are more --set values, after the ones Install always sets.
	Set []string
	// Timeout bounds the wait for every Deployment to be Ready; 3m if 0.
	Timeout time.Duration
	// Logf receives progress lines; silent if nil.
	Logf func(format string, args ...any)
}

// Release is an installed instance of ebb.
type Release struct {
	Name, Namespace string
	Names           groupsuffix.Names
	// Fullname prefixes the release's namespaced objects (<fullname>-scaler).
	Fullname string
	// ScalerAddress is the scaler Service's address as the chart's NOTES
	// give it, for a ScaledObject's scalerAddress.
	ScalerAddress string
	// ScalerAuth is the ClusterTriggerAuthentication a ScaledObject names
	// when the release serves the scaler over TLS (scaler.tls.enabled).
	ScalerAuth string
	// Deployments are the chart's Deployments, webhook first.
	Deployments []string
}

// ImageTag is the tag `make images` gives the images the local cluster
// serves under the chart's own repositories.
const ImageTag = "dev"

// values are what every e2e install sets: self-signed TLS (no
// cert-manager), text logs, and the tag of the images built here.
func values(o Options) []string {
	return []string{
		"groupSuffix=" + o.GroupSuffix,
		"certManager.enabled=false",
		"logFormat=text",
		"webhook.image.tag=" + ImageTag,
		"activator.image.tag=" + ImageTag,
		"scaler.image.tag=" + ImageTag,
		"federation.image.tag=" + ImageTag,
		"sidecar.image.tag=" + ImageTag,
		"test.image.tag=" + ImageTag,
		"test.appImage.tag=" + ImageTag,
	}
}

func (o *Options) defaults() {
	if o.Release == "" {
		o.Release = "ebb"
	}
	if o.Namespace == "" {
		o.Namespace = "ebb-system"
	}
	if o.GroupSuffix == "" {
		o.GroupSuffix = groupsuffix.Default
	}
	if o.Timeout == 0 {
		o.Timeout = 3 * time.Minute
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
}

// Install runs `helm install` of charts/ebb into c and waits until every
// Deployment of the release is Ready and the webhook configuration carries
// a caBundle.
func Install(ctx context.Context, c *cluster.Cluster, o Options) (*Release, error) {
	o.defaults()
	names, err := groupsuffix.New(o.GroupSuffix)
	if err != nil {
		return nil, err
	}
	root, err := repo.Root()
	if err != nil {
		return nil, err
	}
	// The release's namespace enforces Pod Security "restricted", as the
	// chart's pods are written to pass it.
	if err := c.EnsureNamespace(ctx, o.Namespace, cluster.PodSecurityRestricted()); err != nil {
		return nil, err
	}
	args := []string{"install", o.Release, filepath.Join(root, "charts", "ebb"),
		"--namespace", o.Namespace, "--create-namespace", "--kubeconfig", c.Kubeconfig}
	for _, v := range append(values(o), o.Set...) {
		args = append(args, "--set", v)
	}
	begin := time.Now()
	if _, err := Helm(ctx, c, args...); err != nil {
		return nil, err
	}
	fullname := o.Release
	if !strings.Contains(o.Release, "ebb") {
		fullname = o.Release + "-ebb"
	}
	r := &Release{
		Name: o.Release, Namespace: o.Namespace, Names: names, Fullname: fullname,
		ScalerAddress: fmt.Sprintf("%s-scaler.%s:9090", fullname, o.Namespace),
		Deployments:   []string{fullname + "-webhook", fullname + "-activator", fullname + "-scaler"},
	}
	if slices.Contains(o.Set, "scaler.tls.enabled=true") {
		r.ScalerAuth = fullname + "-scaler-tls." + o.GroupSuffix
	}
	o.Logf("helm install %s (%s) into %s in %s", o.Release, o.GroupSuffix, o.Namespace, time.Since(begin).Round(time.Millisecond))
	for _, d := range r.Deployments {
		if err := WaitDeploymentReady(ctx, c, o.Namespace, d, o.Timeout); err != nil {
			return r, err
		}
		o.Logf("deployment %s/%s ready after %s", o.Namespace, d, time.Since(begin).Round(time.Millisecond))
	}
	if err := cluster.WaitFor(ctx, 30*time.Second, "the webhook's caBundle in "+webhookConfigurationName(names), func(ctx context.Context) (bool, error) {
		mwc, err := c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, webhookConfigurationName(names), metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return caBundleSet(mwc), nil
	}); err != nil {
		return r, err
	}
	o.Logf("webhook configuration %s carries a caBundle", webhookConfigurationName(names))
	return r, nil
}

func webhookConfigurationName(n groupsuffix.Names) string { return "sidecar-injector." + n.Suffix() }

func caBundleSet(mwc *admissionregistrationv1.MutatingWebhookConfiguration) bool {
	if len(mwc.Webhooks) == 0 {
		return false
	}
	for _, w := range mwc.Webhooks {
		if len(w.ClientConfig.CABundle) == 0 {
			return false
		}
	}
	return true
}

// Uninstall runs `helm uninstall` and waits until the release's pods are gone.
// Test runs `helm test` on the release (ebb-check) and returns its output
// with the check's log.
func (r *Release) Test(ctx context.Context, c *cluster.Cluster) (string, error) {
	return Helm(ctx, c, "test", r.Name, "--namespace", r.Namespace, "--kubeconfig", c.Kubeconfig, "--timeout", "4m", "--logs")
}

func (r *Release) Uninstall(ctx context.Context, c *cluster.Cluster) error {
	if _, err := Helm(ctx, c, "uninstall", r.Name, "--namespace", r.Namespace, "--kubeconfig", c.Kubeconfig); err != nil {
		return err
	}
	return cluster.WaitFor(ctx, 60*time.Second, "the pods of release "+r.Name+" gone", func(ctx context.Context) (bool, error) {
		pods, err := c.Client.CoreV1().Pods(r.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + r.Name})
		return err == nil && len(pods.Items) == 0, err
	})
}

// Helm runs bin/helm and returns its standard output.
func Helm(ctx context.Context, c *cluster.Cluster, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.BinDir, "helm"), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w: %s", strings.Join(args[:min(2, len(args))], " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// WaitDeploymentReady waits until every replica of the Deployment is
// updated and ready; on timeout the error describes its pods.
func WaitDeploymentReady(ctx context.Context, c *cluster.Cluster, ns, name string, timeout time.Duration) error {
	err := cluster.WaitFor(ctx, timeout, "deployment "+ns+"/"+name+" ready", func(ctx context.Context) (bool, error) {
		d, err := c.Client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		return deploymentReady(d), nil
	})
	if err != nil {
		return fmt.Errorf("%w\n%s", err, DescribePods(ctx, c, ns))
	}
	return nil
}

func deploymentReady(d *appsv1.Deployment) bool {
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	return d.Status.ObservedGeneration >= d.Generation && d.Status.UpdatedReplicas == want &&
		d.Status.ReadyReplicas == want && d.Status.Replicas == want
}

// DescribePods is one line per pod of ns and per container not ready, for
// error messages.
func DescribePods(ctx context.Context, c *cluster.Cluster, ns string) string {
	pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "pods: " + err.Error()
	}
	sort.Slice(pods.Items, func(i, j int) bool { return pods.Items[i].Name < pods.Items[j].Name })
	var lines []string
	for _, p := range pods.Items {
		lines = append(lines, fmt.Sprintf("pod %s/%s: %s", p.Namespace, p.Name, p.Status.Phase))
		for _, s := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
			if s.Ready {
				continue
			}
			state := "not ready"
			switch {
			case s.State.Waiting != nil:
				state = "waiting " + s.State.Waiting.Reason + ": " + s.State.Waiting.Message
			case s.State.Terminated != nil:
				state = fmt.Sprintf("terminated %s (exit %d)", s.State.Terminated.Reason, s.State.Terminated.ExitCode)
			}
			lines = append(lines, fmt.Sprintf("  container %s: %s, restarts %d", s.Name, state, s.RestartCount))
		}
	}
	if len(lines) == 0 {
		return "no pods in " + ns
	}
	return strings.Join(lines, "\n")
}
