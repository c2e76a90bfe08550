package install

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"

	"github.com/ebb-dev/ebb/test/cluster"
)

// NoHosts takes the release's hosts annotation off an app's pod template
// (an edit for DeployAtZeroWith): the app's hosts are then only the ones
// its Ingresses and HTTPRoutes name, and its Service's own names.
func (r *Release) NoHosts(d *appsv1.Deployment) {
	delete(d.Spec.Template.Annotations, r.Names.HostsAnnotation())
}

// Apply creates every object of a multi-document YAML text, as
// `kubectl create -f` does, with strict field validation, and returns
// them as created.
func Apply(ctx context.Context, c *cluster.Cluster, text string) ([]*unstructured.Unstructured, error) {
	objs, err := DecodeYAML(text)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(c.RestConfig)
	if err != nil {
		return nil, err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(c.RestConfig)
	if err != nil {
		return nil, err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	var out []*unstructured.Unstructured
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if meta.IsNoMatchError(err) {
			mapper.Reset() // a CRD installed after the first discovery
			m, err = mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		}
		if err != nil {
			return out, fmt.Errorf("apply %s %s: %w", o.GetKind(), o.GetName(), err)
		}
		created, err := dyn.Resource(m.Resource).Namespace(o.GetNamespace()).Create(ctx, o, metav1.CreateOptions{FieldValidation: "Strict"})
		if err != nil {
			return out, fmt.Errorf("apply %s %s/%s: %w", o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
		out = append(out, created)
	}
	return out, nil
}

// DecodeYAML decodes a multi-document YAML text; empty documents are
// skipped.
func DecodeYAML(text string) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(text), 4096)
	var out []*unstructured.Unstructured
	for {
		var o map[string]any
		if err := dec.Decode(&o); err == io.EOF {
			return out, nil
		} else if err != nil {
			return nil, err
		}
		if len(o) > 0 {
			out = append(out, &unstructured.Unstructured{Object: o})
		}
	}
}

// ActivatorPods lists the release's activator pods, of every pool, that
// run and have an address.
func (r *Release) ActivatorPods(ctx context.Context, c *cluster.Cluster) ([]corev1.Pod, error) {
	pods, err := c.Client.CoreV1().Pods(r.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=activator,app.kubernetes.io/instance=" + r.Name})
	if err != nil {
		return nil, fmt.Errorf("list activator pods: %w", err)
	}
	var out []corev1.Pod
	for _, p := range pods.Items {
		if p.Status.PodIP != "" && p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			out = append(out, p)
		}
	}
	return out, nil
}

// ActivatorSum sums, over pods (the release's activator pods), the values
// of the /metrics samples of metric name whose labels include every one of
// labels (each written as in the exposition format, outcome="proxied"); a
// pod that has none counts 0. A pod that cannot be read is an error: a sum
// without it would be wrong.
func ActivatorSum(ctx context.Context, pods []corev1.Pod, name string, labels ...string) (float64, error) {
	client := &http.Client{Timeout: 2 * time.Second}
	total := 0.0
	for _, p := range pods {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(p.Status.PodIP, "8081")+"/metrics", nil)
		if err != nil {
			return 0, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, fmt.Errorf("metrics of %s: %w", p.Name, err)
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if v, ok := sampleValue(sc.Text(), name, labels); ok {
				total += v
			}
		}
		err = sc.Err()
		resp.Body.Close()
		if err != nil {
			return 0, fmt.Errorf("metrics of %s: %w", p.Name, err)
		}
	}
	return total, nil
}

// sampleValue is the value of an exposition-format line of metric name
// whose labels include every one of labels.
func sampleValue(line, name string, labels []string) (float64, bool) {
	rest, ok := strings.CutPrefix(line, name+"{")
	if !ok {
		return 0, false
	}
	set, value, ok := strings.Cut(rest, "} ")
	if !ok {
		return 0, false
	}
	have := strings.Split(set, ",")
	for _, l := range labels {
		if !slices.Contains(have, l) {
			return 0, false
		}
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
	return v, err == nil
}
