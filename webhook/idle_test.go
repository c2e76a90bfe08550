package webhook_test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/internal/testwait"
	"github.com/ebb-dev/ebb/test/cluster"
	"github.com/ebb-dev/ebb/webhook"
	"github.com/ebb-dev/ebb/webhook/webhooktest"
)

// requestCounter counts the API requests that pass through a rest.Config
// it wraps, by verb and path; watches (long-running) apart.
type requestCounter struct {
	mu      sync.Mutex
	counts  map[string]int
	writes  int
	reads   int
	watches int
}

func (c *requestCounter) wrap(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			c.count(req)
			return rt.RoundTrip(req)
		})
	}
	return cfg
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

func (c *requestCounter) count(req *http.Request) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.counts == nil {
		c.counts = map[string]int{}
	}
	verb := req.Method
	switch {
	case req.Method == http.MethodGet && req.URL.Query().Get("watch") == "true":
		verb = "WATCH"
		c.watches++
	case req.Method == http.MethodGet:
		c.reads++
	default:
		c.writes++
	}
	c.counts[verb+" "+req.URL.Path]++
}

// reset returns what was counted since the last reset, and starts again.
func (c *requestCounter) reset() (reads, writes, watches int, counts map[string]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	reads, writes, watches, counts = c.reads, c.writes, c.watches, c.counts
	c.reads, c.writes, c.watches, c.counts = 0, 0, 0, nil
	return reads, writes, watches, counts
}

func describe(counts map[string]int) string {
	var lines []string
	for k, n := range counts {
		lines = append(lines, fmt.Sprintf("%5d %s", n, k))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// installKEDACRD installs KEDA's ScaledObject CRD from its module.
func installKEDACRD(t *testing.T, cfg *rest.Config) {
	t.Helper()
	dir, err := cluster.ModuleDir("github.com/kedacore/keda/v2")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{Paths: []string{filepath.Join(dir, "config", "crd", "bases", "keda.sh_scaledobjects.yaml")}}); err != nil {
		t.Fatal(err)
	}
}

// scaledObject is the README's ScaledObject for app, scaling Deployment
// target.
func scaledObject(ns, name, target, app string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{
			"scaleTargetRef":  map[string]any{"name": target},
			"minReplicaCount": int64(0),
			"triggers": []any{map[string]any{"type": "external-push", "metadata": map[string]any{
				"scalerAddress": "ebb-scaler.ebb-system:9090", "app": app, "targetConcurrency": "100"}}},
		},
	}}
}

// idleApps is how many apps TestIdleFleetCostsNothing settles, in
// idleNamespaces namespaces; idleWindow how long it then watches.
const (
	idleApps       = 30
	idleNamespaces = 3
	idleWindow     = 15 * time.Second
)

// TestIdleFleetCostsNothing: once a fleet's AppRoutes are settled (every
// condition True, KEDA's API and the Gateway API's HTTPRoutes installed,
// ScaledObjects for every app),
// the controller makes no write and no read of the API server while
// nothing changes: what it needs comes from its watches and caches. The
// controller of an API server of its own is counted through a
// RoundTripper around its rest.Config.
func TestIdleFleetCostsNothing(t *testing.T) {
	needEnv(t)
	names := groupsuffix.MustNew("idle.example.com")
	ienv, err := webhooktest.Start([]string{names.Suffix()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ienv.Stop() }()
	installKEDACRD(t, ienv.Config)
	// The Gateway API too: the controller watches HTTPRoutes, and polls
	// for them only while they are not served.
	if _, err := envtest.InstallCRDs(ienv.Config, gatewayCRD(t)); err != nil {
		t.Fatal(err)
	}
	var counter requestCounter
	inst, err := webhooktest.StartInstance(ienv, names.Suffix(), admissionregistrationv1.Fail, func(o *webhook.Options) {
		o.RESTConfig = counter.wrap(ienv.Config)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = inst.Stop() }()

	ctx := context.Background()
	c, err := client.New(ienv.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	appLabel, hostsKey := names.AppLabel(), names.Key("hosts")
	for n := range idleNamespaces {
		ns := fmt.Sprintf("fleet-%d", n)
		makeNamespace(t, c, ns, map[string]string{names.InjectLabel(): "enabled"})
		for i := range idleApps / idleNamespaces {
			app := fmt.Sprintf("app-%d", i)
			zeroDeployment(t, c, ns, app, map[string]string{appLabel: app}, map[string]string{hostsKey: app + "." + ns + ".example.com"})
			svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: app}, Spec: corev1.ServiceSpec{
				Selector: map[string]string{"app.kubernetes.io/name": app},
				Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}},
			}}
			if err := c.Create(ctx, svc); err != nil {
				t.Fatal(err)
			}
			if err := c.Create(ctx, scaledObject(ns, app, app, app)); err != nil {
				t.Fatal(err)
			}
		}
	}
	testwait.Check(t, 60*time.Second, func() error {
		for n := range idleNamespaces {
			ns := fmt.Sprintf("fleet-%d", n)
			for i := range idleApps / idleNamespaces {
				r, err := getRoute(ctx, c, names, ns, fmt.Sprintf("app-%d", i))
				if err != nil {
					return err
				}
				for typ, want := range map[string]metav1.ConditionStatus{
					routingv1alpha1.ConditionReady: metav1.ConditionTrue, routingv1alpha1.ConditionScaledByKEDA: metav1.ConditionTrue,
					routingv1alpha1.ConditionPodsInjected: metav1.ConditionTrue, routingv1alpha1.ConditionConflicted: metav1.ConditionFalse,
				} {
					if cond := meta.FindStatusCondition(r.Status.Conditions, typ); cond == nil || cond.Status != want {
						return fmt.Errorf("AppRoute %s/%s: %s = %+v, want %s", ns, r.Name, typ, cond, want)
					}
				}
			}
		}
		return nil
	})
	// The scalers and the activators write their parts of the status, as
	// on a cluster: the controller leaves them alone.
	for n := range idleNamespaces {
		ns := fmt.Sprintf("fleet-%d", n)
		for i := range idleApps / idleNamespaces {
			othersStatus(t, c, names, ns, fmt.Sprintf("app-%d", i))
		}
	}
	time.Sleep(2 * time.Second) // the last status writes' own watch events
	counter.reset()
	time.Sleep(idleWindow)
	reads, writes, watches, counts := counter.reset()
	t.Logf("%d apps idle for %v: %d reads (%.2f/s), %d writes (%.2f/s), %d watches started:\n%s",
		idleApps, idleWindow, reads, float64(reads)/idleWindow.Seconds(), writes, float64(writes)/idleWindow.Seconds(), watches, describe(counts))
	// A watch that times out is started again (client-go: 5-10 min); a
	// constant, whatever the number of apps.
	if writes > 0 || reads > 2 {
		t.Errorf("while %d apps idle for %v the controller made %d writes and %d reads (want 0 writes, at most 2 reads):\n%s", idleApps, idleWindow, writes, reads, describe(counts))
	}
}

// othersStatus writes what a scaler (Idle) and an activator pool (Admitted,
// Propagated, pools) write on an AppRoute's status, with their own field
// managers.
func othersStatus(t *testing.T, c client.Client, names groupsuffix.Names, ns, name string) {
	t.Helper()
	ctx := context.Background()
	now := metav1.Now().Rfc3339Copy()
	for manager, status := range map[string]map[string]any{
		"ebb-scaler": {"conditions": []any{map[string]any{"type": routingv1alpha1.ConditionIdle, "status": "True", "reason": "NoRequests",
			"message": "nothing in flight", "lastTransitionTime": now}}},
		"ebb-activator": {
			"conditions": []any{
				map[string]any{"type": routingv1alpha1.ConditionAdmitted, "status": "True", "reason": "Admitted", "message": "pool default", "lastTransitionTime": now},
				map[string]any{"type": routingv1alpha1.ConditionPropagated, "status": "True", "reason": "Propagated", "message": "every activator", "lastTransitionTime": now},
			},
			"pools": []any{map[string]any{"name": "default", "conditions": []any{
				map[string]any{"type": routingv1alpha1.ConditionAdmitted, "status": "True", "reason": "Admitted", "message": "pool default", "lastTransitionTime": now},
			}}},
		},
	} {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": routingv1alpha1.GroupVersion(names.Group()).String(), "kind": routingv1alpha1.Kind,
			"metadata": map[string]any{"name": name, "namespace": ns},
			"status":   status,
		}}
		if err := c.Status().Patch(ctx, u, client.Apply, client.FieldOwner(manager), client.ForceOwnership); err != nil {
			t.Fatalf("apply %s's status of AppRoute %s/%s: %v", manager, ns, name, err)
		}
	}
}
