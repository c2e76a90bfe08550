package fleet

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ebb-dev/ebb/test/cluster"
	"github.com/ebb-dev/ebb/test/e2e/install"
)

// UserAgent is the fleet's own client's, so that its requests stand apart
// in the audit log from the other clients that share the admin identity
// (the controller manager, KEDA).
const UserAgent = "ebb-fleet"

// Label marks every Deployment the fleet creates.
const Label = "ebb-fleet"

// App is one app of the fleet.
type App struct {
	Namespace, Name string
	// Host is its ebb hosts annotation; URL its Service's ClusterIP.
	Host, URL string
}

// Fleet is a set of apps across Namespaces, made through its own client.
type Fleet struct {
	C       *cluster.Cluster
	Release *install.Release
	Client  kubernetes.Interface
	Dyn     dynamic.Interface
	// Namespaces hold the apps Add makes, round-robin.
	Namespaces []string
	// Apps are the apps at zero Add made, in order.
	Apps []App
	// Workers bounds the objects created at once; 16 if 0.
	Workers int
	// Cooldown is the ScaledObjects' cooldownPeriod in seconds, the
	// README's 60 if 0; RateWindow their trigger's rateWindow, the
	// scaler's default if "".
	Cooldown   int64
	RateWindow string
	Logf       func(format string, args ...any)
}

// New opts namespaces <prefix>-00 … in to the release's injection (Pod
// Security "restricted" enforced, as the e2e suite's are) and returns the
// fleet that fills them. Its client asks up to 200 requests/s (burst 400).
// If a namespace fails, New returns the error with the fleet of the
// namespaces it made or tried to (the failed one included): Delete it.
func New(ctx context.Context, c *cluster.Cluster, r *install.Release, prefix string, namespaces int, logf func(string, ...any)) (*Fleet, error) {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	cfg := rest.CopyConfig(c.RestConfig)
	cfg.UserAgent, cfg.QPS, cfg.Burst = UserAgent, 200, 400
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("fleet client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("fleet client: %w", err)
	}
	f := &Fleet{C: c, Release: r, Client: client, Dyn: dyn, Logf: logf}
	for i := range namespaces {
		ns := fmt.Sprintf("%s-%02d", prefix, i)
		f.Namespaces = append(f.Namespaces, ns)
		if err := c.EnsureNamespace(ctx, ns, r.OptIn()); err != nil {
			return f, err
		}
	}
	return f, nil
}

// Add creates n more apps at zero, app i of the fleet in namespace i mod
// len(Namespaces), Workers at a time, and returns them with when the last
// object was applied.
func (f *Fleet) Add(ctx context.Context, n int) ([]App, time.Time, error) {
	workers := f.Workers
	if workers == 0 {
		workers = 16
	}
	first := len(f.Apps)
	apps := make([]App, n)
	for i := range apps {
		k := first + i
		apps[i] = App{Namespace: f.Namespaces[k%len(f.Namespaces)], Name: fmt.Sprintf("app-%05d", k)}
	}
	next := make(chan int)
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	begin := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				a, err := f.Create(ctx, apps[i].Namespace, apps[i].Name, 0, 0)
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				}
				apps[i] = a
				mu.Unlock()
			}
		}()
	}
	for i := range apps {
		if i > 0 && i%250 == 0 {
			f.Logf("created %d of %d apps in %s", i, n, time.Since(begin).Round(time.Second))
		}
		mu.Lock()
		failed := len(errs) > 0
		mu.Unlock()
		if failed || ctx.Err() != nil {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	last := time.Now()
	if err := errors.Join(errs...); err != nil {
		return nil, last, err
	}
	if err := ctx.Err(); err != nil {
		return nil, last, err
	}
	f.Apps = append(f.Apps, apps...)
	return apps, last, nil
}

// Create makes one app as the README's complete example does: its
// Service (port 80 to the pods' port named http), its Deployment of the
// test app with replicas (the e2e suite's app: the app label, the hosts
// annotation <name>.example.com, a readiness probe on the named port) and
// its ScaledObject (minReplicaCount minReplicas, max 10, cooldown 60 s
// unless Cooldown says otherwise, a
// fallback of 1 replica after 3 failures, KEDA's default polling, ebb's
// external-push trigger with targetConcurrency 100).
func (f *Fleet) Create(ctx context.Context, ns, name string, replicas int32, minReplicas int64) (App, error) {
	a := App{Namespace: ns, Name: name, Host: name + ".example.com"}
	r := f.Release
	svc, err := f.Client.CoreV1().Services(ns).Create(ctx, r.Service(ns, name), metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		svc, err = f.Client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	}
	if err != nil {
		return a, fmt.Errorf("service %s/%s: %w", ns, name, err)
	}
	a.URL = "http://" + svc.Spec.ClusterIP + "/"
	d := r.App(ns, name, a.Host, replicas)
	d.Labels = map[string]string{Label: "app"}
	if _, err := f.Client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return a, fmt.Errorf("deployment %s/%s: %w", ns, name, err)
	}
	if _, err := f.Dyn.Resource(cluster.ScaledObjects).Namespace(ns).Create(ctx, f.scaledObject(ns, name, minReplicas), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return a, fmt.Errorf("ScaledObject %s/%s: %w", ns, name, err)
	}
	return a, nil
}

func (f *Fleet) scaledObject(ns, name string, minReplicas int64) *unstructured.Unstructured {
	meta := map[string]any{"scalerAddress": f.Release.ScalerAddress, "app": name, "targetConcurrency": strconv.Itoa(100)}
	if f.RateWindow != "" {
		meta["rateWindow"] = f.RateWindow
	}
	cooldown := f.Cooldown
	if cooldown == 0 {
		cooldown = 60
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{
			"scaleTargetRef":  map[string]any{"name": name},
			"minReplicaCount": minReplicas, "maxReplicaCount": int64(10),
			"cooldownPeriod": cooldown,
			"fallback":       map[string]any{"failureThreshold": int64(3), "replicas": int64(1)},
			"triggers":       []any{map[string]any{"type": "external-push", "metadata": meta}},
		},
	}}
}

// WaitAtZero waits until every Deployment of the fleet in its namespaces
// but those of keep (namespace/name) has 0 replicas and no pod left, not
// even a terminating one, and says how many had not when timeout ends.
func (f *Fleet) WaitAtZero(ctx context.Context, keep map[string]bool, timeout time.Duration) error {
	var up []string
	err := poll(ctx, 2*time.Second, timeout, "the fleet's apps at zero", func(ctx context.Context) (bool, error) {
		up = up[:0]
		ds, err := f.Client.AppsV1().Deployments("").List(ctx, metav1.ListOptions{LabelSelector: Label})
		if err != nil {
			return false, err
		}
		mine := map[string]bool{}
		for _, ns := range f.Namespaces {
			mine[ns] = true
		}
		for _, d := range ds.Items {
			if mine[d.Namespace] && !keep[d.Namespace+"/"+d.Name] && (replicasOf(&d) > 0 || d.Status.Replicas > 0) {
				up = append(up, d.Namespace+"/"+d.Name)
			}
		}
		// Terminating pods too: their end (the kubelet's final delete, the
		// controllers' status writes) is not for an idle window.
		pods, err := f.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: f.Release.Names.AppLabel()})
		if err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			if mine[p.Namespace] && !keep[p.Namespace+"/"+p.Labels[f.Release.Names.AppLabel()]] {
				up = append(up, "pod "+p.Namespace+"/"+p.Name)
			}
		}
		return len(up) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("%w: %d still up (%v)", err, len(up), up[:min(len(up), 5)])
	}
	return nil
}

func replicasOf(d *appsv1.Deployment) int32 {
	if d.Spec.Replicas == nil {
		return 1
	}
	return *d.Spec.Replicas
}

// Delete deletes every namespace of the fleet, then waits, up to timeout,
// until those it deleted are gone. A failed delete does not stop the
// others: it returns every failure.
func (f *Fleet) Delete(ctx context.Context, timeout time.Duration) error {
	var errs []error
	var deleted []string
	for _, ns := range f.Namespaces {
		if err := f.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete namespace %s: %w", ns, err))
			continue
		}
		deleted = append(deleted, ns)
	}
	errs = append(errs, poll(ctx, time.Second, timeout, "the fleet's namespaces gone", func(ctx context.Context) (bool, error) {
		for _, ns := range deleted {
			if _, err := f.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, nil
			}
		}
		return true, nil
	}))
	return errors.Join(errs...)
}

// poll calls cond every interval until it returns true, an error, or
// timeout passes.
func poll(ctx context.Context, interval, timeout time.Duration, what string, cond func(context.Context) (bool, error)) error {
	if err := wait.PollUntilContextTimeout(ctx, interval, timeout, true, cond); err != nil {
		return fmt.Errorf("wait for %s: %w", what, err)
	}
	return nil
}
