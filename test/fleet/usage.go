package fleet

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ebb-dev/ebb/test/cluster"
	"github.com/ebb-dev/ebb/webhook/inject"
)

// Programs are the cluster's programs whose cost is measured beside ebb's:
// KEDA's operator and metrics adapter, and the API server every client
// loads.
var Programs = []string{"keda-operator", "keda-adapter", "kube-apiserver"}

// Sample is what every ebb pod and every program of Programs had used at
// one moment.
type Sample struct {
	At time.Time
	// Pods by UID, with their component (the ServiceAccount's name without
	// the release's fullname: webhook, activator, scaler).
	Pods      map[string]cluster.Usage
	Component map[string]string
	Programs  map[string]cluster.Usage
	// Notes name the pods listed that were gone (deleted, or no longer
	// running) before their usage was read: they are not in Pods.
	Notes []string
}

// Component returns the component of an ebb pod: its ServiceAccount's name
// without the release's "<fullname>-".
func (f *Fleet) Component(p *corev1.Pod) string {
	return strings.TrimPrefix(p.Spec.ServiceAccountName, f.Release.Fullname+"-")
}

// EbbPods lists the release's running pods.
func (f *Fleet) EbbPods(ctx context.Context) ([]corev1.Pod, error) {
	pods, err := f.Client.CoreV1().Pods(f.Release.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list ebb's pods: %w", err)
	}
	var out []corev1.Pod
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out, nil
}

// SampleUsage reads the usage of ebb's pods and of Programs. A pod that
// went between the list and the read of its cgroup is left out, in Notes.
func (f *Fleet) SampleUsage(ctx context.Context) (Sample, error) {
	s := Sample{At: time.Now(), Pods: map[string]cluster.Usage{}, Component: map[string]string{}, Programs: map[string]cluster.Usage{}}
	pods, err := f.EbbPods(ctx)
	if err != nil {
		return s, err
	}
	for i := range pods {
		u, err := cluster.PodUsage(&pods[i])
		if err != nil {
			gone, gerr := f.podGone(ctx, &pods[i])
			if gerr != nil {
				return s, errors.Join(err, gerr)
			}
			if !gone {
				return s, err
			}
			s.Notes = append(s.Notes, fmt.Sprintf("%s pod %s went while sampled (%v)", f.Component(&pods[i]), pods[i].Name, err))
			continue
		}
		s.Pods[string(pods[i].UID)] = u
		s.Component[string(pods[i].UID)] = f.Component(&pods[i])
	}
	for _, name := range Programs {
		u, err := f.C.ProcessUsage(name)
		if err != nil {
			return s, err
		}
		s.Programs[name] = u
	}
	return s, nil
}

// podGone says whether a pod listed running is no longer: deleted (or
// replaced by one of the same name), being deleted, or not running.
func (f *Fleet) podGone(ctx context.Context, p *corev1.Pod) (bool, error) {
	now, err := f.Client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	return now.UID != p.UID || now.DeletionTimestamp != nil || now.Status.Phase != corev1.PodRunning, nil
}

// Cost is what one component or program used between two samples.
type Cost struct {
	Name string
	// Replicas counts its pods that ran through both samples (0 for a
	// program).
	Replicas int
	// Cores is its CPU time over the time between the samples, all its
	// pods together; RSS its resident memory at the second, all pods.
	Cores float64
	RSS   int64
}

// Costs compares two samples: each ebb component (its pods that ran
// through both; a pod that came or went is left out and named in the
// returned note, as are the samples' Notes), then each program.
func Costs(a, b Sample) ([]Cost, string) {
	secs := b.At.Sub(a.At).Seconds()
	by := map[string]*Cost{}
	note := append(append([]string{}, a.Notes...), b.Notes...)
	for uid, ub := range b.Pods {
		comp := b.Component[uid]
		ua, ok := a.Pods[uid]
		if !ok {
			note = append(note, "a "+comp+" pod started within the window")
			continue
		}
		if by[comp] == nil {
			by[comp] = &Cost{Name: comp}
		}
		c := by[comp]
		c.Replicas++
		c.Cores += (ub.CPU - ua.CPU).Seconds() / secs
		c.RSS += ub.RSS
	}
	for uid := range a.Pods {
		if _, ok := b.Pods[uid]; !ok {
			note = append(note, "a "+a.Component[uid]+" pod went within the window")
		}
	}
	var out []Cost
	for _, c := range by {
		out = append(out, *c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	for _, name := range Programs {
		out = append(out, Cost{Name: name, Cores: (b.Programs[name].CPU - a.Programs[name].CPU).Seconds() / secs, RSS: b.Programs[name].RSS})
	}
	return out, strings.Join(note, "; ")
}

// Series counts the sample lines (every line that is not a comment nor
// empty: one per series) of the Prometheus text a /metrics URL serves.
func Series(ctx context.Context, url string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	// The text format, not OpenMetrics nor protobuf.
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("scrape %s: %s", url, resp.Status)
	}
	n := 0
	s := bufio.NewScanner(resp.Body)
	s.Buffer(make([]byte, 64<<10), 1<<20)
	for s.Scan() {
		if line := strings.TrimSpace(s.Text()); line != "" && !strings.HasPrefix(line, "#") {
			n++
		}
	}
	if err := s.Err(); err != nil {
		return 0, fmt.Errorf("scrape %s: %w", url, err)
	}
	return n, nil
}

// MetricsURL is the /metrics URL of a pod at its pod IP: its container
// port named portName (the first container that has it, init containers
// included, where the injected sidecar is).
func MetricsURL(p *corev1.Pod, portName string) (string, error) {
	for _, c := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
		for _, port := range c.Ports {
			if port.Name == portName {
				return "http://" + net.JoinHostPort(p.Status.PodIP, strconv.Itoa(int(port.ContainerPort))) + "/metrics", nil
			}
		}
	}
	return "", fmt.Errorf("pod %s/%s has no port %q", p.Namespace, p.Name, portName)
}

// ComponentSeries counts the series each of ebb's pods exports, at its
// port named metrics (the webhook) or else admin (the activator, the
// scaler), and returns the most of any pod of each component.
func (f *Fleet) ComponentSeries(ctx context.Context) (map[string]int, error) {
	pods, err := f.EbbPods(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for i := range pods {
		url, err := MetricsURL(&pods[i], "metrics")
		if err != nil {
			if url, err = MetricsURL(&pods[i], "admin"); err != nil {
				return nil, err
			}
		}
		n, err := Series(ctx, url)
		if err != nil {
			return nil, err
		}
		comp := f.Component(&pods[i])
		out[comp] = max(out[comp], n)
	}
	return out, nil
}

// SidecarSeries counts the series the sidecar of an app's first running
// pod exports.
func (f *Fleet) SidecarSeries(ctx context.Context, ns, app string) (int, error) {
	pods, err := f.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: f.Release.Names.AppLabel() + "=" + app})
	if err != nil {
		return 0, fmt.Errorf("pods of %s/%s: %w", ns, app, err)
	}
	for i := range pods.Items {
		if p := &pods.Items[i]; p.Status.Phase == corev1.PodRunning {
			url, err := MetricsURL(p, inject.AdminPortName)
			if err != nil {
				return 0, err
			}
			return Series(ctx, url)
		}
	}
	return 0, fmt.Errorf("no running pod of %s/%s", ns, app)
}
