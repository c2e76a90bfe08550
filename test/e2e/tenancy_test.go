package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/test/cluster"
	"github.com/ebb-dev/ebb/test/e2e/install"
)

// TestTenantGetsNoneOfAnotherNamespacesRequests (issue 34): a tenant's app
// in another namespace, warm and created before shop's, that lists the one
// form of shop's Service address admission cannot tell from an outside
// domain (api.<ns>; admission refuses the others, which the test checks
// too), gets none of the requests clients send to shop's Service while
// shop's app is at zero — every form of the Service's address, upper case,
// with a port, with a trailing dot — and its AppRoute says it does not
// serve that host and why.
func TestTenantGetsNoneOfAnotherNamespacesRequests(t *testing.T) {
	ctx := t.Context()
	const shopNS, squatNS, app = "e2e-tenant-shop", "e2e-tenant-squat", "tenant-api"
	if err := lc.EnsureNamespace(ctx, squatNS, ebb.OptIn()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			dumpState(t, shopNS)
			dumpState(t, squatNS)
		}
	})

	squat := ebb.App(squatNS, "squat", app+"."+shopNS, 1)
	// A longer path prefix than shop's route: a Service's names are its
	// namespace's on every path.
	squat.Spec.Template.Annotations[ebb.Names.Key("paths")] = "/hello/login"
	dry := &corev1.Pod{ObjectMeta: *squat.Spec.Template.ObjectMeta.DeepCopy(), Spec: squat.Spec.Template.Spec}
	dry.Name, dry.Namespace = "squat-dry", squatNS
	dry.Annotations[ebb.Names.HostsAnnotation()] = app + "." + shopNS + ".svc.cluster.local," + app + ",198.19.0.10"
	_, err := lc.Client.CoreV1().Pods(squatNS).Create(ctx, dry, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	for _, w := range []string{
		`host "` + app + `.` + shopNS + `.svc.cluster.local" is a cluster name of namespace "` + shopNS + `"`,
		`host "` + app + `" is a single label`, `host "198.19.0.10" is an IP address`,
	} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("admission of a pod listing shop's cluster names: %v; want a refusal naming %s", err, w)
		}
	}

	if _, err := lc.Client.CoreV1().Services(squatNS).Create(ctx, ebb.Service(squatNS, "squat"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := lc.Client.AppsV1().Deployments(squatNS).Create(ctx, squat, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := install.WaitDeploymentReady(ctx, lc, squatNS, "squat", 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // creation timestamps have whole seconds: the squatter's route is older

	a, err := ebb.DeployAtZero(ctx, lc, shopNS, app, scaling, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	ip := strings.TrimSuffix(strings.TrimPrefix(a.URL, "http://"), "/")
	fqdn := app + "." + shopNS + ".svc.cluster.local"
	hosts := []string{fqdn, strings.ToUpper(fqdn) + ":80", fqdn + ".", app + "." + shopNS + ".svc", app + "." + shopNS, app, app + ":80", ip, ip + ":80"}
	client := &http.Client{Timeout: 90 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	paths := []string{"", "hello/login"}
	results := make([]install.Result, len(hosts)*len(paths))
	var wg sync.WaitGroup
	for i, h := range hosts {
		for j, p := range paths {
			wg.Go(func() { results[i*len(paths)+j] = install.Get(ctx, client, a.URL+p, h) })
		}
	}
	wg.Wait()
	for k, r := range results {
		// The test app answers paths under /hello/ as it answers /.
		if r.Err != nil || r.Status != http.StatusOK || !strings.HasPrefix(r.Body, "hello from "+app+"-") {
			t.Errorf("Host %q, path /%s, to shop's Service at zero: %d %q, %v; want 200 from shop's own pod", hosts[k/len(paths)], paths[k%len(paths)], r.Status, r.Body, r.Err)
		}
	}

	err = cluster.WaitFor(ctx, 30*time.Second, "the squatter's Conflicted condition", func(ctx context.Context) (bool, error) {
		route, err := ebb.AppRoute(ctx, lc, squatNS, "squat")
		if err != nil {
			return false, err
		}
		cond := meta.FindStatusCondition(route.Status.Conditions, routingv1alpha1.ConditionConflicted)
		want := fmt.Sprintf("host %s.%s path /hello/login (ServiceOfAnotherNamespace: AppRoute %s/%s serves it)", app, shopNS, shopNS, app)
		return cond != nil && cond.Status == metav1.ConditionTrue && cond.Reason == "ServiceOfAnotherNamespace" && strings.Contains(cond.Message, want), nil
	})
	if err != nil {
		t.Error(err)
	}
}
