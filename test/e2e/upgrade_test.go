package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ebb-dev/ebb/test/cluster"
	"github.com/ebb-dev/ebb/test/e2e/install"
	"github.com/ebb-dev/ebb/test/repo"
)

// upgradeStartupDelay is how long the app of TestUpgrade takes to start:
// longer than the rollout of every ebb pod, so the old activators are
// terminating while they hold its requests.
const upgradeStartupDelay = 20 * time.Second

// TestUpgrade: `helm upgrade` rolls every pod of a release (webhook,
// activator, scaler: a pod annotation changes) while an app at zero that
// takes 20 s to start is woken by a request every 200 ms to its Service,
// each on its own connection. The old activators are terminated while they
// hold the app's requests and while kube-proxy still routes to them; every
// request must get the app's 200: none refused or reset by an activator
// that stopped accepting, none cut when its held requests are released.
func TestUpgrade(t *testing.T) {
	ctx := t.Context()
	r := installSecond(t, "upgrade", "upgrade.example.com", "activator.replicas=2")
	a, err := r.DeployAtZeroWith(ctx, lc, "e2e-upgrade", "slow", scaling, func(d *appsv1.Deployment) {
		c := &d.Spec.Template.Spec.Containers[0]
		c.Args = append(c.Args, "--startup-delay="+upgradeStartupDelay.String())
	}, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	old, err := releasePods(ctx, r)
	if err != nil {
		t.Fatal(err)
	}

	var tl timeline
	tl.mark(time.Now(), "at zero")
	watch := watchUpgrade(ctx, r, a, old, &tl)

	// helm upgrade can take 20 s on a busy API server before it changes a
	// Deployment, so the traffic starts once it has: the app's cold start
	// then overlaps the rollout whatever helm's own time.
	root := repo.MustRoot(t)
	upgrade := []string{"upgrade", r.Name, filepath.Join(root, "charts", "ebb"), "--namespace", r.Namespace, "--kubeconfig", lc.Kubeconfig, "--reuse-values"}
	for _, c := range []string{"webhook", "activator", "scaler"} {
		upgrade = append(upgrade, "--set-string", c+".podAnnotations.e2e-rollout=1")
	}
	tl.mark(time.Now(), "helm upgrade")
	helmDone := make(chan error, 1)
	go func() { _, err := install.Helm(ctx, lc, upgrade...); helmDone <- err }()
	if err := cluster.WaitFor(ctx, 2*time.Minute, "helm's upgrade of the activators' Deployment", func(ctx context.Context) (bool, error) {
		d, err := lc.Client.AppsV1().Deployments(r.Namespace).Get(ctx, r.Fullname+"-activator", metav1.GetOptions{})
		return err == nil && d.Spec.Template.Annotations["e2e-rollout"] == "1", err
	}); err != nil {
		t.Fatal(err)
	}
	tl.mark(time.Now(), "the activators' Deployment upgraded; a request every 200 ms starts")
	client := &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{DisableKeepAlives: true, MaxIdleConnsPerHost: -1}}
	var (
		mu      sync.Mutex
		results []install.Result
		stop    = make(chan struct{})
		sending sync.WaitGroup
	)
	sending.Go(func() {
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		var inner sync.WaitGroup
		defer inner.Wait()
		for range 1500 { // 5 minutes at most
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			inner.Go(func() {
				res := install.Get(ctx, client, a.URL, a.Host)
				mu.Lock()
				results = append(results, res)
				mu.Unlock()
			})
		}
	})
	stopTraffic := sync.OnceFunc(func() { close(stop); sending.Wait() })
	defer stopTraffic()

	// The first requests are held by the old activators and wake the app;
	// every pod of the release rolls while the app starts.
	if err := <-helmDone; err != nil {
		t.Fatal(err)
	}
	tl.mark(time.Now(), "helm upgrade done")
	for _, d := range r.Deployments {
		if err := install.WaitDeploymentReady(ctx, lc, r.Namespace, d, 3*time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	tl.mark(time.Now(), "every Deployment of the release rolled out")
	// Every old pod gone (a terminating activator stays until it has
	// answered what it holds), and the app serving.
	if err := cluster.WaitFor(ctx, 4*time.Minute, "the release's old pods gone", func(ctx context.Context) (bool, error) {
		pods, err := releasePods(ctx, r)
		if err != nil {
			return false, err
		}
		for name := range old {
			if _, ok := pods[name]; ok {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := cluster.WaitFor(ctx, 2*time.Minute, "the app ready", func(ctx context.Context) (bool, error) {
		d, err := lc.Client.AppsV1().Deployments(a.Namespace).Get(ctx, a.Name, metav1.GetOptions{})
		return err == nil && d.Status.ReadyReplicas > 0, err
	}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	tl.mark(time.Now(), "traffic stops")
	stopTraffic()
	events := watch()

	var lost, refused, cut int
	byOutcome := map[string]int{}
	for _, res := range results {
		switch {
		case res.Err != nil && (errors.Is(res.Err, syscall.ECONNREFUSED) || errors.Is(res.Err, syscall.ECONNRESET)):
			refused++
			byOutcome["refused or reset"]++
		case res.Err != nil && strings.Contains(res.Err.Error(), "EOF"):
			cut++
			byOutcome["EOF"]++
		case res.Err != nil:
			byOutcome["error"]++
		default:
			byOutcome[fmt.Sprint(res.Status)]++
		}
		if res.Err != nil || res.Status != http.StatusOK {
			lost++
		}
	}
	t.Logf("timeline:\n%s", tl.String())
	t.Logf("requests: %d in all, by outcome %v", len(results), byOutcome)
	fmt.Printf("FIGURE upgrade (every ebb pod rolled while an app starting in %s is woken by a request every 200 ms): requests lost %d of %d (refused or reset %d, cut %d)\n",
		upgradeStartupDelay, lost, len(results), refused, cut)
	if err := install.Failures(results); err != nil {
		t.Errorf("not the app's 200 during the upgrade:\n%v", err)
	}
	// The scenario held: an old activator was told to stop while it held
	// requests of the app, that is before the app was ready.
	if events.appReady.IsZero() || events.firstActivatorStop.IsZero() || !events.firstActivatorStop.Before(events.appReady) {
		t.Errorf("no old activator was terminated before the app was ready (first stop %s, app ready %s): the rollout did not overlap the cold start",
			events.firstActivatorStop.Format(time.TimeOnly), events.appReady.Format(time.TimeOnly))
	}
	if len(results) < 100 {
		t.Errorf("only %d requests sent: the traffic did not run", len(results))
	}
}

// releasePods returns the pods of release r by name.
func releasePods(ctx context.Context, r *install.Release) (map[string]corev1.Pod, error) {
	pods, err := lc.Client.CoreV1().Pods(r.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + r.Name})
	if err != nil {
		return nil, err
	}
	out := map[string]corev1.Pod{}
	for _, p := range pods.Items {
		out[p.Name] = p
	}
	return out, nil
}

type upgradeEvents struct {
	firstActivatorStop, appReady time.Time
}

// watchUpgrade marks on tl, every 100 ms, when each old pod of r is told
// to stop and when it is gone, each new pod ready, and when the app's
// replicas change, until the returned func is called.
func watchUpgrade(ctx context.Context, r *install.Release, a *install.AppAtZero, old map[string]corev1.Pod, tl *timeline) func() upgradeEvents {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan upgradeEvents)
	go func() {
		var ev upgradeEvents
		defer func() { done <- ev }()
		seen := map[string]string{}
		lastApp := ""
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			now := time.Now()
			if pods, err := releasePods(ctx, r); err == nil {
				names := make([]string, 0, len(pods)+len(old))
				for n := range pods {
					names = append(names, n)
				}
				for n := range old {
					if _, ok := pods[n]; !ok {
						names = append(names, n)
					}
				}
				sort.Strings(names)
				for _, n := range names {
					p, present := pods[n]
					_, wasOld := old[n]
					state := "ready"
					switch {
					case !present:
						state = "gone"
					case p.DeletionTimestamp != nil:
						state = "terminating"
						if wasOld && p.Labels["app.kubernetes.io/name"] == "ebb-activator" && ev.firstActivatorStop.IsZero() {
							ev.firstActivatorStop = now
						}
					case !podIsReady(&p):
						state = "not ready"
					}
					if seen[n] != state {
						what := "new"
						if wasOld {
							what = "old"
						}
						tl.mark(now, fmt.Sprintf("%s pod %s: %s", what, n, state))
						seen[n] = state
					}
				}
			}
			if d, err := lc.Client.AppsV1().Deployments(a.Namespace).Get(ctx, a.Name, metav1.GetOptions{}); err == nil && d.Spec.Replicas != nil {
				s := fmt.Sprintf("app: replicas %d, ready %d", *d.Spec.Replicas, d.Status.ReadyReplicas)
				if s != lastApp {
					tl.mark(now, s)
					lastApp = s
				}
				if d.Status.ReadyReplicas > 0 && ev.appReady.IsZero() {
					ev.appReady = now
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() upgradeEvents { cancel(); return <-done }
}

func podIsReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
