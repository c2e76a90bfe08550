package e2e

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/test/cluster"
	"github.com/ebb-dev/ebb/test/e2e/install"
	"github.com/ebb-dev/ebb/test/workers"
)

// The README's sections whose examples these tests apply: a StatefulSet
// with its headless governing Service and the Service ebb routes, and a
// Worker (the tests' own kind with the scale subresource); each with its
// ScaledObject.
const (
	readmeStatefulSetSection  = "\n## StatefulSets\n"
	readmeCustomTargetSection = "\n## Custom /scale targets\n"
)

// readmePodinfo is the container image of the README's examples; the tests
// run the test app in its place, on podinfo's port and readiness path, as
// TestReadmeExample does.
const readmePodinfo = "        image: ghcr.io/stefanprodan/podinfo:6.7.1\n"

// workloadApp is an app at zero deployed from a README example.
type workloadApp struct {
	*install.AppAtZero
	Workload install.Workload
	// Ref is what the AppRoute's scaleTargetRef must say (and
	// AppAtZero.Service the Service ebb must route).
	Ref routingv1alpha1.ScaleTargetReference
}

// fast is the ScaledObject timing the scenarios give a README example: KEDA
// polls every second, the scaler's window is 3 s, the app goes to zero 5 s
// after it, and the HPA (target 2 in flight per pod, at most 2 pods) moves
// within seconds either way.
func fast(so *unstructured.Unstructured) error {
	behavior := map[string]any{"stabilizationWindowSeconds": int64(3), "policies": []any{map[string]any{"type": "Percent", "value": int64(100), "periodSeconds": int64(1)}}}
	for _, f := range []struct {
		v    any
		path []string
	}{
		{int64(1), []string{"spec", "pollingInterval"}},
		{int64(5), []string{"spec", "cooldownPeriod"}},
		{int64(2), []string{"spec", "maxReplicaCount"}},
		{map[string]any{"horizontalPodAutoscalerConfig": map[string]any{"behavior": map[string]any{"scaleUp": behavior, "scaleDown": behavior}}}, []string{"spec", "advanced"}},
	} {
		if err := unstructured.SetNestedField(so.Object, f.v, f.path...); err != nil {
			return err
		}
	}
	triggers, _, err := unstructured.NestedSlice(so.Object, "spec", "triggers")
	if err != nil || len(triggers) != 1 {
		return fmt.Errorf("the example's ScaledObject has %d triggers (%v), want ebb's alone", len(triggers), err)
	}
	meta, ok := triggers[0].(map[string]any)["metadata"].(map[string]any)
	if !ok || meta["targetConcurrency"] == nil {
		return errors.New("the example's trigger has no targetConcurrency")
	}
	meta["targetConcurrency"], meta["rateWindow"] = "2", "3s"
	return unstructured.SetNestedSlice(so.Object, triggers, "spec", "triggers")
}

// deployReadmeApp applies a README example (its YAML block, for app name
// in namespace shop) into namespace ns, opted in as the README says, with
// the test app in podinfo's place and its environment env, the app renamed
// to name, and the ScaledObject changed by edit (when not nil); it returns
// once the app stands at zero behind the activators.
func deployReadmeApp(t *testing.T, example, app, ns, name string, env map[string]string, edit func(*unstructured.Unstructured) error) *workloadApp {
	t.Helper()
	ctx := t.Context()
	for _, s := range []string{readmePodinfo, "namespace: shop", "scalerAddress: " + ebb.ScalerAddress, "app: " + app} {
		if !strings.Contains(example, s) {
			t.Fatalf("the README's example no longer has %q: update this test's substitutions\n%s", s, example)
		}
	}
	container := "        image: ghcr.io/ebb-dev/ebb-test-app:dev\n        env:\n"
	for _, k := range slices.Sorted(maps.Keys(map[string]string(env))) {
		container += fmt.Sprintf("        - {name: %s, value: %q}\n", k, env[k])
	}
	text := strings.Replace(example, readmePodinfo, container, 1)
	text = strings.ReplaceAll(text, "namespace: shop", "namespace: "+ns)
	text = strings.ReplaceAll(text, app, name)
	objs, err := install.DecodeYAML(text)
	if err != nil {
		t.Fatal(err)
	}
	a := &workloadApp{AppAtZero: &install.AppAtZero{Namespace: ns, Name: name}}
	var docs []string
	for _, o := range objs {
		switch o.GetKind() {
		case "ScaledObject":
			if edit != nil {
				if err := edit(o); err != nil {
					t.Fatal(err)
				}
			}
			ref, _, _ := unstructured.NestedStringMap(o.Object, "spec", "scaleTargetRef")
			// KEDA's defaults: a scaleTargetRef without a kind names a Deployment.
			a.Ref = routingv1alpha1.ScaleTargetReference{APIVersion: cmp.Or(ref["apiVersion"], "apps/v1"), Kind: cmp.Or(ref["kind"], "Deployment"), Name: ref["name"]}
		case "Service":
			if ip, _, _ := unstructured.NestedString(o.Object, "spec", "clusterIP"); ip != "None" {
				a.Service = o.GetName()
			}
		case "Deployment":
			a.Workload = install.Workload{GVR: install.Deployments, Namespace: ns, Name: o.GetName()}
		case "StatefulSet":
			a.Workload = install.Workload{GVR: install.StatefulSets, Namespace: ns, Name: o.GetName()}
		case workers.GVK.Kind:
			a.Workload = install.Workload{GVR: workers.GVR, Namespace: ns, Name: o.GetName()}
		}
		b, err := yaml.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, string(b))
	}
	if a.Service == "" || a.Ref.Kind == "" || a.Workload.Name == "" {
		t.Fatalf("the README's example lacks a Service with a ClusterIP, a ScaledObject or its workload:\n%s", text)
	}
	// kubectl create namespace; kubectl label namespace ... inject=enabled
	if err := lc.EnsureNamespace(ctx, ns, map[string]string{ebb.Names.InjectLabel(): "enabled"}); err != nil {
		t.Fatal(err)
	}
	if _, err := install.Apply(ctx, lc, strings.Join(docs, "---\n")); err != nil {
		t.Fatal(err)
	}
	svc, err := lc.Client.CoreV1().Services(ns).Get(ctx, a.Service, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a.URL, a.Host = "http://"+svc.Spec.ClusterIP+"/", a.Service+"."+ns
	if _, err := ebb.WaitRoute(ctx, lc, ns, name, "ScaledByKEDA True", 2*time.Minute, func(r *routingv1alpha1.AppRoute) bool {
		c := install.RouteCondition(r, routingv1alpha1.ConditionScaledByKEDA)
		return c != nil && c.Status == metav1.ConditionTrue
	}); err != nil {
		t.Fatalf("%v\n%s", err, ebb.Diagnose(ctx, lc, ns, name))
	}
	if err := waitScaledObjectReady(ctx, ns, name); err != nil {
		t.Fatal(err)
	}
	if err := ebb.WaitWorkloadAtZero(ctx, lc, a.Workload, a.AppAtZero, 2*time.Minute); err != nil {
		t.Fatalf("the README's %s never stood at zero behind the activator: %v\n%s", a.Ref.Kind, err, ebb.Diagnose(ctx, lc, ns, name))
	}
	t.Logf("%s %s/%s at zero behind Service %s (%s)", a.Ref.Kind, ns, name, a.Service, a.URL)
	return a
}

// waitScaledObjectReady waits until KEDA reports the ScaledObject Ready:
// its scaler answered, so a held request's push reaches KEDA at once.
func waitScaledObjectReady(ctx context.Context, ns, name string) error {
	dyn, err := dynamic.NewForConfig(lc.RestConfig)
	if err != nil {
		return err
	}
	var conds []any
	err = cluster.WaitFor(ctx, 60*time.Second, "ScaledObject "+ns+"/"+name+" Ready", func(ctx context.Context) (bool, error) {
		so, err := dyn.Resource(cluster.ScaledObjects).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		conds, _, _ = unstructured.NestedSlice(so.Object, "status", "conditions")
		return slices.ContainsFunc(conds, func(c any) bool {
			m, _ := c.(map[string]any)
			return m["type"] == "Ready" && m["status"] == "True"
		}), nil
	})
	if err != nil {
		return fmt.Errorf("%w; conditions: %v", err, conds)
	}
	return nil
}

// readmeWorkloadExample is the YAML block of a README section about a
// workload kind.
func readmeWorkloadExample(t *testing.T, section, kind string) string {
	t.Helper()
	return readmeExamples(t, section, kind)[kind]
}

// TestStatefulSetApp: the README's StatefulSet (OrderedReady, a headless
// governing Service named in serviceName, and a ClusterIP Service that
// targets the port by name) at zero, its app ready 2 s after it starts.
// The AppRoute names the StatefulSet and the ClusterIP Service, though the
// headless one's name sorts first; 200 concurrent requests are all answered
// 200, each by a pod whose app was ready (the test app's X-App-Ready); a
// request every 20 ms loses none while the app goes 0 → 2 → 0 (and wakes
// again), ledger-1 created only once ledger-0 was Ready, and ledger-1 the
// one removed on the way down.
func TestStatefulSetApp(t *testing.T) {
	example := readmeWorkloadExample(t, readmeStatefulSetSection, "StatefulSet")
	a := deployReadmeApp(t, example, "ledger", "e2e-statefulset", "ledger", map[string]string{"LISTEN": ":9898", "READY_PATH": "/readyz", "READY_AFTER": "2s"}, fast)
	t.Cleanup(func() {
		if t.Failed() {
			dumpState(t, a.Namespace)
			t.Logf("%s", ebb.Diagnose(context.Background(), lc, a.Namespace, a.Name))
		}
	})
	if a.Service != "ledger-api" {
		t.Fatalf("the README's routed Service is %q: update this test", a.Service)
	}
	checkScaleTargetRef(t, a)
	served := wakeConcurrently(t, a, 200)
	if !served["ledger-0"] {
		t.Errorf("the held requests were answered by %v, want ledger-0 (OrderedReady starts it first)", slices.Sorted(maps.Keys(served)))
	}
	var order *podOrder
	scaleUpAndDownUnderTraffic(t, a, func() { order = watchPodOrder(t.Context(), a, "ledger-0", "ledger-1") }, func(pods []corev1.Pod) {
		ready0, seen1 := order.stop()
		byName := map[string]corev1.Pod{}
		for _, p := range pods {
			byName[p.Name] = p
		}
		first, second := byName["ledger-0"], byName["ledger-1"]
		if first.Name == "" || second.Name == "" {
			t.Errorf("at 2 replicas the pods are %v, want ledger-0 and ledger-1", slices.Sorted(maps.Keys(byName)))
			return
		}
		t.Logf("from zero: ledger-0 first seen Ready at %s, ledger-1 first seen at %s (pods read every 20 ms); ledger-0 Ready at %s, ledger-1 created at %s by the API server's clock (seconds)",
			ready0.Format("15:04:05.000"), seen1.Format("15:04:05.000"), readySince(&first).Format("15:04:05"), second.CreationTimestamp.Format("15:04:05"))
		if ready0.IsZero() || seen1.IsZero() || seen1.Before(ready0) || second.CreationTimestamp.Time.Before(readySince(&first)) {
			t.Errorf("ledger-1 came before ledger-0 was Ready: OrderedReady not kept")
		}
	}, func(pods []corev1.Pod) {
		if len(pods) != 1 || pods[0].Name != "ledger-0" {
			t.Errorf("back at 1 replica the pods are %v, want ledger-0 (the highest ordinal goes first)", podNameList(pods))
		}
	})
}

// TestCustomScaleTarget: the README's Worker (kind Worker of example.com,
// the tests' own kind with the scale subresource, listed in the chart's
// scaleTargets; its pods made by test/workers' controller) at zero, its app
// ready 2 s after it starts. The AppRoute names the Worker; 200 concurrent
// requests are all answered 200 by a ready app; a request every 20 ms loses
// none while the app goes 0 → 2 → 0 (and wakes again).
func TestCustomScaleTarget(t *testing.T) {
	example := readmeWorkloadExample(t, readmeCustomTargetSection, workers.GVK.Kind)
	a := deployReadmeApp(t, example, "jobs", "e2e-worker", "jobs", map[string]string{"LISTEN": ":9898", "READY_PATH": "/readyz", "READY_AFTER": "2s"}, fast)
	t.Cleanup(func() {
		if t.Failed() {
			dumpState(t, a.Namespace)
			t.Logf("%s", ebb.Diagnose(context.Background(), lc, a.Namespace, a.Name))
		}
	})
	if a.Ref != (routingv1alpha1.ScaleTargetReference{APIVersion: workers.GroupVersion.String(), Kind: workers.GVK.Kind, Name: "jobs"}) {
		t.Fatalf("the README's ScaledObject targets %+v: update this test", a.Ref)
	}
	checkScaleTargetRef(t, a)
	wakeConcurrently(t, a, 200)
	scaleUpAndDownUnderTraffic(t, a, nil, nil, nil)
}

// checkScaleTargetRef checks the app's AppRoute: its scaleTargetRef is the
// workload the ScaledObject scales and its Service the one with a ClusterIP.
func checkScaleTargetRef(t *testing.T, a *workloadApp) {
	t.Helper()
	route, err := ebb.AppRoute(t.Context(), lc, a.Namespace, a.Name)
	if err != nil {
		t.Fatal(err)
	}
	if route.Spec.ScaleTargetRef != a.Ref {
		t.Errorf("AppRoute %s/%s spec.scaleTargetRef = %+v, want %+v", a.Namespace, a.Name, route.Spec.ScaleTargetRef, a.Ref)
	}
	if route.Spec.Service.Name != a.Service {
		t.Errorf("AppRoute %s/%s routes Service %q, want %q (the one with a ClusterIP)", a.Namespace, a.Name, route.Spec.Service.Name, a.Service)
	}
}

// wakeConcurrently sends n concurrent requests to the app at zero, each on
// its own connection, and checks that every one is answered 200 by one of
// the app's pods whose app said it was ready (X-App-Ready: true, which the
// test app sets once its readiness path passes). It returns the pods that
// answered.
func wakeConcurrently(t *testing.T, a *workloadApp, n int) map[string]bool {
	t.Helper()
	ctx := t.Context()
	client := newClient(90 * time.Second)
	answers := make([]answer, n)
	var wg sync.WaitGroup
	begin := time.Now()
	for i := range answers {
		wg.Go(func() { answers[i] = fetch(ctx, client, a.URL, a.Host, nil) })
	}
	wg.Wait()
	names := podNames(t, a.AppAtZero)
	served, bad := map[string]bool{}, map[string]int{}
	var slowest time.Duration
	for _, r := range answers {
		pod := strings.TrimPrefix(strings.TrimSpace(r.Body), "hello from ")
		switch {
		case r.Err != nil || r.Status != http.StatusOK:
			bad[r.String()]++
		case !names[pod]:
			bad["answered by "+pod+", no pod of the app"]++
		case r.Header.Get("X-App-Ready") != "true":
			bad[fmt.Sprintf("answered by %s before its app was ready (X-App-Ready %q)", pod, r.Header.Get("X-App-Ready"))]++
		default:
			served[pod] = true
		}
		slowest = max(slowest, r.Took)
	}
	lost := 0
	for what, k := range bad {
		lost += k
		t.Errorf("%d× %s", k, what)
	}
	t.Logf("%d concurrent requests at zero: %d answered 200 by a ready app in %s (the last), served by %v", n, n-lost, slowest.Round(time.Millisecond), slices.Sorted(maps.Keys(served)))
	fmt.Printf("FIGURE %s at zero: %d concurrent requests, %d lost, all answered within %s\n", a.Ref.Kind, n, lost, time.Since(begin).Round(time.Millisecond))
	return served
}

// scaleUpAndDownUnderTraffic takes the app from zero to 2 pods and back
// to zero under a request every 20 ms, as TestZeroLossUnderChange does for
// a Deployment: the requests wake it; 8 clients looping on 300 ms requests
// make the HPA (target 2 in flight) scale to 2; they stop and it goes back
// to 1; the steady requests pause until KEDA sets replicas to 0 and resume
// at once, onto the draining pod or the activators. No request may fail,
// both pods must have served; atZero is called once the app is at zero,
// before the first request, and atTwo and atOne check the app's pods when
// it is at 2 ready pods and back at 1 (each when not nil).
func scaleUpAndDownUnderTraffic(t *testing.T, a *workloadApp, atZero func(), atTwo, atOne func([]corev1.Pod)) {
	t.Helper()
	ctx := t.Context()
	if err := ebb.WaitWorkloadAtZero(ctx, lc, a.Workload, a.AppAtZero, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	if atZero != nil {
		atZero()
	}
	var tl timeline
	tl.mark(time.Now(), "at zero; a request every 20 ms starts")
	steady := startSteady(ctx, a, 20*time.Millisecond)
	var (
		mu      sync.Mutex
		answers []answer
		stopped bool
	)
	stopSteady := func() {
		if !stopped {
			stopped = true
			answers = append(answers, steady.Stop()...)
		}
	}
	defer stopSteady()
	fail := func(format string, args ...any) {
		t.Helper()
		stopSteady()
		t.Logf("timeline:\n%s", tl.String())
		t.Fatalf(format, args...)
	}
	if err := a.Workload.WaitReplicas(ctx, lc, 1, true, true, 60*time.Second); err != nil {
		fail("wake: %v", err)
	}
	tl.mark(time.Now(), "1 replica ready")

	burstStop := make(chan struct{})
	var burst sync.WaitGroup
	client := newClient(60 * time.Second)
	for range 8 {
		burst.Go(func() {
			for range 400 { // 400 × 300 ms bounds a client to 2 min
				select {
				case <-burstStop:
					return
				default:
				}
				r := fetch(ctx, client, a.URL+"?delay=300ms", a.Host, nil)
				mu.Lock()
				answers = append(answers, r)
				mu.Unlock()
			}
		})
	}
	stopBurst := func() {
		if burstStop != nil {
			close(burstStop)
			burst.Wait()
			burstStop = nil
		}
	}
	defer stopBurst()
	tl.mark(time.Now(), "burst starts: 8 clients looping on 300 ms requests")
	if err := a.Workload.WaitReplicas(ctx, lc, 2, false, true, 90*time.Second); err != nil {
		stopBurst()
		fail("HPA scale-up to 2: %v", err)
	}
	tl.mark(time.Now(), "2 replicas ready")
	pods := livePodsOf(t, a)
	if atTwo != nil {
		atTwo(pods)
	}
	time.Sleep(5 * time.Second) // both pods serve a while
	stopBurst()
	tl.mark(time.Now(), "burst stops")

	if err := a.Workload.WaitReplicas(ctx, lc, 1, false, false, 90*time.Second); err != nil {
		fail("HPA scale-down to 1: %v", err)
	}
	if err := waitLivePods(ctx, a, 1); err != nil {
		fail("%v", err)
	}
	tl.mark(time.Now(), "1 replica, 1 pod")
	if atOne != nil {
		atOne(livePodsOf(t, a))
	}
	time.Sleep(2 * time.Second)

	answers = append(answers, steady.Stop()...)
	tl.mark(time.Now(), "steady requests pause")
	if err := a.Workload.WaitReplicas(ctx, lc, 0, false, false, 90*time.Second); err != nil {
		stopped = true
		fail("scale to zero: %v", err)
	}
	tl.mark(time.Now(), "replicas 0; steady requests resume")
	steady = startSteady(ctx, a, 20*time.Millisecond)
	time.Sleep(5 * time.Second)
	stopSteady()
	tl.mark(time.Now(), "steady requests stop")

	mu.Lock()
	defer mu.Unlock()
	served := map[string]int{}
	var lost []install.Result
	var slowest answer
	for _, r := range answers {
		if r.Took > slowest.Took {
			slowest = r
		}
		if r.Err != nil || r.Status != http.StatusOK {
			lost = append(lost, install.Result{Status: r.Status, Body: r.Body, Err: r.Err, Sent: r.Sent, Took: r.Took})
			continue
		}
		served[strings.TrimPrefix(strings.TrimSpace(r.Body), "hello from ")]++
	}
	t.Logf("timeline:\n%s", tl.String())
	t.Logf("%d requests across 0 → 2 → 0 → 1: %d lost; answered by %v; the slowest sent at %s: %s", len(answers), len(lost), served, slowest.Sent.Format("15:04:05.000"), slowest)
	fmt.Printf("FIGURE %s: zero loss (0→1→2→1→0→1, a request every 20 ms and a burst): lost %d of %d\n", a.Ref.Kind, len(lost), len(answers))
	if len(lost) > 0 {
		t.Errorf("not 200 while the %s went 0 → 2 → 0:\n%v", a.Ref.Kind, install.Failures(lost))
	}
	both := 0
	for _, p := range pods {
		if served[p.Name] > 0 {
			both++
		}
	}
	if both < 2 {
		t.Errorf("of the 2 pods %v, %d served (answers by pod: %v); want both", podNameList(pods), both, served)
	}
}

// startSteady is startProber for the app with requests that wait up to
// 60 s for their answer: at zero a StatefulSet's new pod 0 starts only once
// the old one, draining, is gone, which a held request waits for.
func startSteady(ctx context.Context, a *workloadApp, interval time.Duration) *prober {
	return startProberWith(ctx, newClient(60*time.Second), a.URL, a.Host, interval)
}

// podOrder records, from the app's pods read every 20 ms, when pod first
// was first seen Ready and pod second first seen at all.
type podOrder struct {
	ready0, seen1 time.Time
	cancel        context.CancelFunc
	done          chan struct{}
}

func watchPodOrder(ctx context.Context, a *workloadApp, first, second string) *podOrder {
	ctx, cancel := context.WithCancel(ctx)
	o := &podOrder{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(o.done)
		for range 30_000 { // bounded: 10 min
			pods, err := ebb.PodsOf(ctx, lc, a.Namespace, a.Name)
			now := time.Now()
			for _, p := range pods {
				if err != nil || p.DeletionTimestamp != nil {
					continue
				}
				if p.Name == first && o.ready0.IsZero() && !readySince(&p).IsZero() {
					o.ready0 = now
				}
				if p.Name == second && o.seen1.IsZero() {
					o.seen1 = now
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return o
}

// stop ends the watch and returns what it saw (zero times: not seen).
func (o *podOrder) stop() (ready0, seen1 time.Time) {
	o.cancel()
	<-o.done
	return o.ready0, o.seen1
}

// livePodsOf lists the app's pods that are not being deleted.
func livePodsOf(t *testing.T, a *workloadApp) []corev1.Pod {
	t.Helper()
	pods, err := ebb.PodsOf(t.Context(), lc, a.Namespace, a.Name)
	if err != nil {
		t.Fatal(err)
	}
	return slices.DeleteFunc(pods, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil })
}

// waitLivePods waits until the app has n pods not being deleted.
func waitLivePods(ctx context.Context, a *workloadApp, n int) error {
	var last []string
	err := cluster.WaitFor(ctx, 60*time.Second, fmt.Sprintf("%d live pod(s) of %s/%s", n, a.Namespace, a.Name), func(ctx context.Context) (bool, error) {
		pods, err := ebb.PodsOf(ctx, lc, a.Namespace, a.Name)
		if err != nil {
			return false, err
		}
		pods = slices.DeleteFunc(pods, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil })
		last = podNameList(pods)
		return len(pods) == n, nil
	})
	if err != nil {
		return fmt.Errorf("%w (last: %v)", err, last)
	}
	return nil
}

func podNameList(pods []corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name)
	}
	slices.Sort(out)
	return out
}

// readySince is when the pod's Ready condition last turned True; zero if
// it is not Ready.
func readySince(p *corev1.Pod) time.Time {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

// TestCustomScaleTargetColdStartFigure: the cold start of one request at
// zero for the README's Worker and StatefulSet against its Deployment (the
// complete example), the same pod template each, 3 apps of each kind woken in turn,
// interleaved, in one run: what the client saw (held → 200) and what the
// activator recorded (status.lastColdStart), medians by kind, and each
// kind's ÷ the Deployment's.
func TestCustomScaleTargetColdStartFigure(t *testing.T) {
	const ns, samples = "e2e-workload-figure", 3
	kinds := []struct{ kind, example, app string }{
		{"Deployment", readmeExample(t), "hello"},
		{"StatefulSet", readmeWorkloadExample(t, readmeStatefulSetSection, "StatefulSet"), "ledger"},
		{workers.GVK.Kind, readmeWorkloadExample(t, readmeCustomTargetSection, workers.GVK.Kind), "jobs"},
	}
	env := map[string]string{"LISTEN": ":9898", "READY_PATH": "/readyz"}
	apps := make([][]*workloadApp, len(kinds))
	t.Run("Deploy", func(t *testing.T) {
		for k, kind := range kinds {
			apps[k] = make([]*workloadApp, samples)
			for i := range samples {
				name := fmt.Sprintf("%s%d", kind.app, i+1)
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					apps[k][i] = deployReadmeApp(t, kind.example, kind.app, ns, name, env, nil)
				})
			}
		}
	})
	if t.Failed() {
		t.FailNow()
	}
	ctx := t.Context()
	client := newClient(60 * time.Second)
	seen, totals := make([][]time.Duration, len(kinds)), make([][]time.Duration, len(kinds))
	var table strings.Builder
	for i := range samples {
		for k, kind := range kinds {
			a := apps[k][i]
			r := fetch(ctx, client, a.URL, a.Host, nil)
			if r.Err != nil || r.Status != http.StatusOK {
				t.Fatalf("%s %s at zero: %s\n%s", kind.kind, a.Name, r, ebb.Diagnose(ctx, lc, a.Namespace, a.Name))
			}
			cs, err := waitColdStart(ctx, a.AppAtZero, r.Sent)
			if err != nil {
				t.Fatal(err)
			}
			seen[k], totals[k] = append(seen[k], r.Took), append(totals[k], cs.Total.Duration)
			var phases []string
			for _, p := range cs.Phases {
				phases = append(phases, p.Name+" "+p.Duration.Round(time.Millisecond).String())
			}
			fmt.Fprintf(&table, "  %-11s %-8s held → 200 %6s  lastColdStart %6s: %s\n", kind.kind, a.Name, r.Took.Round(time.Millisecond), cs.Total.Round(time.Millisecond), strings.Join(phases, ", "))
		}
	}
	t.Logf("cold starts, one request at zero each:\n%s", table.String())
	base := median(slices.Clone(seen[0]))
	for k, kind := range kinds {
		m := median(slices.Clone(seen[k]))
		fmt.Printf("FIGURE cold start of a %s at zero (median of %d, held → 200): %s; activator's total %s; ÷ Deployment's %.2f\n",
			kind.kind, samples, m.Round(time.Millisecond), median(slices.Clone(totals[k])).Round(time.Millisecond), float64(m)/float64(base))
	}
}
