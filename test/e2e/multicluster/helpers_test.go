package multicluster

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/test/cluster"
	"github.com/ebb-dev/ebb/test/e2e/install"
)

// fastHPA scales up and down within seconds (the HPA's default waits 5
// minutes before it scales down).
var fastHPA = func() map[string]any {
	fast := map[string]any{"stabilizationWindowSeconds": int64(2), "policies": []any{map[string]any{"type": "Percent", "value": int64(100), "periodSeconds": int64(1)}}}
	return map[string]any{"scaleUp": fast, "scaleDown": fast}
}()

// deployBoth deploys the app at zero in both clusters, with its
// ScaledObject (whose bounds the FederatedScale will take over).
func deployBoth(t *testing.T, ns, name string, s install.Scaling) map[string]*install.AppAtZero {
	t.Helper()
	apps := map[string]*install.AppAtZero{}
	for _, m := range []member{a, b} {
		app, err := m.ebb.DeployAtZero(t.Context(), m.c, ns, name, s, t.Logf)
		if err != nil {
			t.Fatalf("cluster %s: %v", m.name, err)
		}
		apps[m.name] = app
	}
	return apps
}

// createFederatedScale makes the FederatedScale on the hub over both
// clusters, with the given stabilization and unreachable windows.
func createFederatedScale(t *testing.T, ns, name string, minR, maxR, stabilization, unreachable int64) {
	t.Helper()
	dyn := a.dyn
	gvr := routingv1alpha1.FederatedScaleResourceIn(a.ebb.Names.Group())
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": gvr.GroupVersion().String(), "kind": routingv1alpha1.FederatedScaleKind,
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{
			"scaledObjectName": name, "minReplicas": minR, "maxReplicas": maxR,
			"clusters":  []any{map[string]any{"name": "a"}, map[string]any{"name": "b"}},
			"rebalance": map[string]any{"stabilizationSeconds": stabilization, "unreachableSeconds": unreachable},
		},
	}}
	if _, err := dyn.Resource(gvr).Namespace(ns).Create(t.Context(), obj, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create FederatedScale: %v", err)
	}
	t.Cleanup(func() {
		_ = dyn.Resource(gvr).Namespace(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// federatedStatus is the FederatedScale's status on the hub.
func federatedStatus(ctx context.Context, ns, name string) (map[string]any, error) {
	o, err := a.dyn.Resource(routingv1alpha1.FederatedScaleResourceIn(a.ebb.Names.Group())).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	st, _, _ := unstructured.NestedMap(o.Object, "status")
	return st, nil
}

// bounds are a member's ScaledObject's min and max, and its generation
// (each write of its spec adds one).
type bounds struct{ min, max, generation int64 }

func readBounds(ctx context.Context, m member, ns, name string) (bounds, error) {
	so, err := m.dyn.Resource(cluster.ScaledObjects).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return bounds{}, err
	}
	minR, _, _ := unstructured.NestedInt64(so.Object, "spec", "minReplicaCount")
	maxR, _, _ := unstructured.NestedInt64(so.Object, "spec", "maxReplicaCount")
	return bounds{minR, maxR, so.GetGeneration()}, nil
}

// waitBounds waits until the member's ScaledObject has min and max.
func waitBounds(t *testing.T, m member, ns, name string, minR, maxR int64, timeout time.Duration) time.Time {
	t.Helper()
	var last bounds
	err := cluster.WaitFor(t.Context(), timeout, fmt.Sprintf("cluster %s's ScaledObject at min %d max %d", m.name, minR, maxR), func(ctx context.Context) (bool, error) {
		var err error
		last, err = readBounds(ctx, m, ns, name)
		return err == nil && last.min == minR && last.max == maxR, nil
	})
	if err != nil {
		st, _ := federatedStatus(t.Context(), ns, name)
		t.Fatalf("%v (last min %d max %d)\nFederatedScale status: %v", err, last.min, last.max, st)
	}
	return time.Now()
}

// replicas is the member's Deployment's spec.replicas (what KEDA and its
// HPA set).
func replicas(ctx context.Context, m member, ns, name string) (int32, error) {
	d, err := m.c.Client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return 0, err
	}
	return *d.Spec.Replicas, nil
}

// atMax: the member's HPA places all it wants, wants its max, and would
// want more (ScalingLimited, TooManyReplicas).
func atMax(ctx context.Context, m member, ns, name string, maxR int64) (bool, error) {
	h, err := m.c.Client.AutoscalingV2().HorizontalPodAutoscalers(ns).Get(ctx, "keda-hpa-"+name, metav1.GetOptions{})
	if err != nil {
		return false, err
	}
	limited := false
	for _, c := range h.Status.Conditions {
		if c.Type == autoscalingv2.ScalingLimited && c.Status == corev1.ConditionTrue && c.Reason == "TooManyReplicas" {
			limited = true
		}
	}
	return limited && int64(h.Status.CurrentReplicas) == maxR && int64(h.Status.DesiredReplicas) == maxR, nil
}

// load keeps n clients sending slow requests (the app waits delay) to the
// app until stopped; it counts what failed.
type load struct {
	stop   context.CancelFunc
	wg     sync.WaitGroup
	ok     atomic.Int64
	failed atomic.Int64
	last   atomic.Value // the last failure
}

func startLoad(ctx context.Context, app *install.AppAtZero, n int, delay time.Duration) *load {
	ctx, cancel := context.WithCancel(ctx)
	l := &load{stop: cancel}
	client := &http.Client{Timeout: 30 * time.Second}
	url := fmt.Sprintf("%s?delay=%s", app.URL, delay)
	for range n {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := 0; i < 100000 && ctx.Err() == nil; i++ {
				r := install.Get(ctx, client, url, app.Host)
				switch {
				case ctx.Err() != nil:
				case r.Err != nil || r.Status != http.StatusOK:
					l.failed.Add(1)
					l.last.Store(fmt.Sprintf("%d %v %s", r.Status, r.Err, r.Body))
				default:
					l.ok.Add(1)
				}
			}
		}()
	}
	return l
}

func (l *load) end() (ok, failed int64, last any) {
	l.stop()
	l.wg.Wait()
	return l.ok.Load(), l.failed.Load(), l.last.Load()
}

// invariant watches both clusters every 200 ms and records every
// observation where the members' maxima or replicas add up to more than
// the global max.
type invariant struct {
	stop   context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	seen   int
	broken []string
}

func watchGlobalMax(ctx context.Context, ns, name string, globalMax int64) *invariant {
	ctx, cancel := context.WithCancel(ctx)
	inv := &invariant{stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(inv.done)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for i := 0; i < 100000; i++ {
			var maxSum, replicaSum int64
			var desc []string
			ok := true
			for _, m := range []member{a, b} {
				bd, err := readBounds(ctx, m, ns, name)
				r, rerr := replicas(ctx, m, ns, name)
				if err != nil || rerr != nil {
					ok = false
					break
				}
				maxSum += bd.max
				replicaSum += int64(r)
				desc = append(desc, fmt.Sprintf("%s max %d replicas %d", m.name, bd.max, r))
			}
			if ok {
				inv.mu.Lock()
				inv.seen++
				if maxSum > globalMax || replicaSum > globalMax {
					inv.broken = append(inv.broken, fmt.Sprintf("%s: %v", time.Now().Format("15:04:05.000"), desc))
				}
				inv.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return inv
}

func (inv *invariant) end() (seen int, broken []string) {
	inv.stop()
	<-inv.done
	inv.mu.Lock()
	defer inv.mu.Unlock()
	return inv.seen, inv.broken
}

// percentile is the p-th percentile (nearest rank) of ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	if len(s) == 0 {
		return 0
	}
	i := int(p/100*float64(len(s))+0.999999) - 1
	return s[max(0, min(i, len(s)-1))]
}

// federationMetric adds up the values of the ebb-federation pods' series
// whose line starts with prefix (the metric's name and labels).
func federationMetric(t *testing.T, prefix string) float64 {
	t.Helper()
	pods, err := a.c.Client.CoreV1().Pods(a.ebb.Namespace).List(t.Context(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=federation"})
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, p := range pods.Items {
		if p.Status.PodIP == "" || p.DeletionTimestamp != nil {
			continue
		}
		resp, err := http.Get("http://" + net.JoinHostPort(p.Status.PodIP, "8080") + "/metrics")
		if err != nil {
			t.Logf("metrics of %s: %v", p.Name, err)
			continue
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if line := sc.Text(); strings.HasPrefix(line, prefix) {
				v, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
				total += v
			}
		}
		resp.Body.Close()
	}
	return total
}
