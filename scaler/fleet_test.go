package scaler

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/holdpush"
	"github.com/ebb-dev/ebb/internal/testwait"
	"github.com/ebb-dev/ebb/test/repo"
)

// fleetAPI starts a kube-apiserver of the test's own (envtest) with ebb's
// CRDs, stopped when the test ends, and returns its config with a client
// limit that never slows the test's own requests; under -short the test
// is skipped.
func fleetAPI(t *testing.T) *rest.Config {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a kube-apiserver (envtest; make test-integration runs it)")
	}
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		assets = filepath.Join(repo.MustRoot(t), "bin", "k8s") // make tools puts them there
	}
	// KEDA's module is in the module cache: the scaler imports its
	// externalscaler package.
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/kedacore/keda/v2").Output()
	if err != nil {
		t.Fatalf("find KEDA's module for its ScaledObject CRD: %v", err)
	}
	keda := strings.TrimSpace(string(out))
	// The CRDs the scaler reads, as in a cluster: AppRoutes and KEDA's
	// ScaledObjects (watched for the Idle condition, scaledobjects.go).
	env := &envtest.Environment{BinaryAssetsDirectory: assets, ErrorIfCRDPathMissing: true, CRDDirectoryPaths: []string{
		filepath.Join(repo.MustRoot(t), "config", "crd", "routing.ebb.dev_approutes.yaml"),
		filepath.Join(keda, "config", "crd", "bases", "keda.sh_scaledobjects.yaml"),
	}}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start kube-apiserver (envtest): %v", err)
	}
	t.Cleanup(func() { env.Stop() })
	cfg.QPS, cfg.Burst = 5000, 5000
	return cfg
}

// createRoutes creates the namespaces and an AppRoute per app.
func createRoutes(t *testing.T, cfg *rest.Config, apps []appKey) {
	t.Helper()
	kube := kubernetes.NewForConfigOrDie(cfg)
	dyn := dynamic.NewForConfigOrDie(cfg)
	nss := map[string]bool{}
	for _, k := range apps {
		if !nss[k.Namespace] {
			nss[k.Namespace] = true
			if _, err := kube.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: k.Namespace}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	var g errgroup.Group
	g.SetLimit(16)
	for _, k := range apps {
		g.Go(func() error {
			_, err := dyn.Resource(routingv1alpha1.GroupVersionResource(routingv1alpha1.DefaultGroup)).Namespace(k.Namespace).Create(t.Context(), &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": routingv1alpha1.GroupVersion(routingv1alpha1.DefaultGroup).String(),
				"kind":       routingv1alpha1.Kind,
				"metadata":   map[string]any{"name": k.Name, "namespace": k.Namespace},
				"spec": map[string]any{
					"appPort":        int64(8080),
					"scaleTargetRef": map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "name": k.Name},
				},
			}}, metav1.CreateOptions{})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
}

// apiCounter counts the requests a client sends, by "METHOD path".
type apiCounter struct {
	mu   sync.Mutex
	on   bool
	seen []string
}

func (c *apiCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		c.mu.Lock()
		if c.on {
			c.seen = append(c.seen, r.Method+" "+r.URL.Path)
		}
		c.mu.Unlock()
		return rt.RoundTrip(r)
	})
}

// count starts counting afresh; stop returns what was counted.
func (c *apiCounter) count() { c.mu.Lock(); c.on, c.seen = true, nil; c.mu.Unlock() }
func (c *apiCounter) stop() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.on = false
	return c.seen
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// startFleetScaler runs a scaler against cfg's API server, its requests
// counted by c, limited to qps and burst; it returns the scaler and a
// gRPC client of it.
func startFleetScaler(t *testing.T, cfg *rest.Config, c *apiCounter, qps float64, burst int) (*Scaler, externalscaler.ExternalScalerClient) {
	t.Helper()
	o := DefaultOptions()
	o.GRPCAddr, o.AdminAddr = "127.0.0.1:0", "127.0.0.1:0"
	o.KubeAPIQPS, o.KubeAPIBurst = qps, burst
	rc := rest.CopyConfig(cfg)
	rc.QPS, rc.Burst = 0, 0 // not the test's own limit
	rc.WrapTransport = c.wrap
	o.RestConfig = rc
	l := logr.Discard()
	o.Logger = &l
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	conn, err := grpc.NewClient(s.GRPCAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	testwait.For(t, 30*time.Second, "first tick", s.Ready)
	return s, externalscaler.NewExternalScalerClient(conn)
}

func fleetRef(k appKey) *externalscaler.ScaledObjectRef {
	return &externalscaler.ScaledObjectRef{Name: k.Name, Namespace: k.Namespace, ScalerMetadata: map[string]string{"app": k.Name, "targetConcurrency": "10"}}
}

// ask asks what KEDA asks about k each polling interval (IsActive, then
// GetMetrics) and returns how long the answers took.
func ask(ctx context.Context, es externalscaler.ExternalScalerClient, k appKey) (time.Duration, error) {
	start := time.Now()
	ref := fleetRef(k)
	if _, err := es.IsActive(ctx, ref); err != nil {
		return 0, err
	}
	if _, err := es.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: ref}); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// idleConditions returns the Idle condition's "status reason" of every
// AppRoute by namespace/name.
func idleConditions(t *testing.T, dyn dynamic.Interface) map[string]string {
	t.Helper()
	list, err := dyn.Resource(routingv1alpha1.GroupVersionResource(routingv1alpha1.DefaultGroup)).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, u := range list.Items {
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			if m, ok := c.(map[string]any); ok && m["type"] == routingv1alpha1.ConditionIdle {
				out[u.GetNamespace()+"/"+u.GetName()] = fmt.Sprint(m["status"], " ", m["reason"])
			}
		}
	}
	return out
}

// TestAsksCostNoAPIRequests: once the scaler has started, KEDA's asks
// about an app at zero (no pod, so the scaler checks that it has an
// AppRoute) cost the API server nothing, whether the app has an AppRoute
// or names none (refused, naming the namespace's apps), and repeated asks
// while nothing changes write nothing. The scaler GET an AppRoute per ask
// (cached 30 s, KEDA's polling interval) and a GET and a LIST per ask of
// an app that names none.
func TestAsksCostNoAPIRequests(t *testing.T) {
	cfg := fleetAPI(t)
	hello, world, typo := appKey{Namespace: "shop", Name: "hello"}, appKey{Namespace: "shop", Name: "world"}, appKey{Namespace: "shop", Name: "hello-typo"}
	createRoutes(t, cfg, []appKey{hello, world})
	var c apiCounter
	s, es := startFleetScaler(t, cfg, &c, 50, 100)
	ctx := t.Context()
	round := func() {
		t.Helper()
		for _, k := range []appKey{hello, world} {
			if _, err := ask(ctx, es, k); err != nil {
				t.Fatalf("ask about %s: %v", k.Name, err)
			}
		}
		_, err := es.IsActive(ctx, fleetRef(typo))
		if err == nil || !strings.Contains(err.Error(), `app "hello-typo": no AppRoute hello-typo in namespace shop`) || !strings.Contains(err.Error(), "its apps are: hello, world") {
			t.Fatalf("ask about an app with no AppRoute: %v, want a refusal naming the namespace's apps", err)
		}
	}
	// The first asks: the refusal's event, the Idle conditions written.
	round()
	dyn := dynamic.NewForConfigOrDie(cfg)
	testwait.For(t, 20*time.Second, "both Idle conditions written", func() bool { return len(idleConditions(t, dyn)) == 2 })
	time.Sleep(2 * time.Second) // the refusal's event posted
	_ = s

	c.count()
	for range 10 {
		round()
		time.Sleep(300 * time.Millisecond)
	}
	if got := c.stop(); len(got) != 0 {
		t.Errorf("10 rounds of asks about 3 apps at zero sent the API server %d request(s), want none: %q", len(got), got)
	}
}

// TestIdleWritesDrainForAFleet: 1,000 AppRoutes in 20 namespaces, asked
// about as KEDA asks, get their Idle condition within a bound set by the
// scaler's API budget (50/s after a burst of 100: 18 s), and again when
// all 1,000 wake at once (an activator holds a request for each); KEDA's
// asks meanwhile are answered at once. The scaler's client had
// client-go's 5/s, its asks waited on AppRoute GETs behind the writes, and
// 1,000 writes took over 200 s.
func TestIdleWritesDrainForAFleet(t *testing.T) {
	cfg := fleetAPI(t)
	var apps []appKey
	for i := range 1000 {
		apps = append(apps, appKey{Namespace: fmt.Sprintf("team-%02d", i%20), Name: fmt.Sprintf("app-%03d", i)})
	}
	createRoutes(t, cfg, apps)
	var c apiCounter
	s, es := startFleetScaler(t, cfg, &c, 50, 100)
	dyn := dynamic.NewForConfigOrDie(cfg)
	ctx, stop := context.WithCancel(t.Context())
	defer stop()

	// KEDA: every app asked about, over and over, by 8 callers.
	var mu sync.Mutex
	var took []time.Duration // how long each ask took
	var g errgroup.Group
	for w := range 8 {
		g.Go(func() error {
			for i := w; ctx.Err() == nil; i = (i + 8) % len(apps) {
				d, err := ask(ctx, es, apps[i])
				if ctx.Err() != nil {
					return nil
				}
				if err != nil {
					return fmt.Errorf("ask about %s: %w", apps[i], err)
				}
				mu.Lock()
				took = append(took, d)
				mu.Unlock()
				time.Sleep(5 * time.Millisecond) // ~1,600 asks/s: KEDA asks 1,000 apps 2 × every 30 s
			}
			return nil
		})
	}
	drain := func(want string) time.Duration {
		t.Helper()
		start := time.Now()
		var n int
		for time.Since(start) < 60*time.Second {
			conds := idleConditions(t, dyn)
			n = 0
			for _, k := range apps {
				if conds[k.Namespace+"/"+k.Name] == want {
					n++
				}
			}
			if n == len(apps) {
				return time.Since(start)
			}
			time.Sleep(500 * time.Millisecond)
		}
		t.Fatalf("after 60 s, %d of %d AppRoutes say Idle=%s", n, len(apps), want)
		return 0
	}
	const bound = 40 * time.Second
	drained := drain("True " + ReasonNoRequests)
	t.Logf("1,000 Idle=True NoRequests written in %v", drained.Round(time.Millisecond))
	if drained > bound {
		t.Errorf("1,000 Idle conditions took %v to write, want under %v", drained, bound)
	}

	push, err := holdpush.NewClient(holdpush.ClientOptions{Activator: "ebb-system/activator-0", Log: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	defer push.Close()
	push.SetAddresses([]string{s.GRPCAddr().String()})
	mu.Lock()
	took = took[:0]
	mu.Unlock()
	c.count()
	for _, k := range apps {
		push.Set(k, 1)
	}
	drained = drain("False " + ReasonRequestsHeld)
	writes := slices.DeleteFunc(c.stop(), func(r string) bool { return !strings.HasPrefix(r, http.MethodPatch) })
	mu.Lock()
	slices.Sort(took)
	p99, slowest := took[len(took)*99/100], took[len(took)-1]
	t.Logf("1,000 apps woke: Idle=False RequestsHeld written in %v with %d writes; %d asks answered meanwhile, p99 %v, the slowest %v",
		drained.Round(time.Millisecond), len(writes), len(took), p99, slowest)
	mu.Unlock()
	if drained > bound {
		t.Errorf("1,000 Idle conditions took %v to write, want under %v", drained, bound)
	}
	if len(writes) > len(apps)+len(apps)/10 {
		t.Errorf("%d writes for 1,000 transitions, want about 1,000", len(writes))
	}
	// An ask that waited on the API server waited for the client's rate
	// limiter, up to its 5 s timeout; the bounds leave room for a busy
	// machine.
	if p99 > 100*time.Millisecond || slowest > 2*time.Second {
		t.Errorf("KEDA's asks while the writes drained: p99 %v, the slowest %v; want under 100 ms and 2 s: asks must not wait on the API server", p99, slowest)
	}

	// Counts churn (2 held, then 3): no write; nothing changes: no write.
	c.count()
	for _, k := range apps[:100] {
		push.Set(k, 2)
	}
	time.Sleep(3 * time.Second)
	if got := c.stop(); len(got) != 0 {
		t.Errorf("held counts that changed, the reason not, sent %d request(s), want none: %q", len(got), got[:min(len(got), 5)])
	}
	stop()
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
}
