package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
)

// denseChain is a tenant's namespace x of n apps with no cycle, a_i waking
// a_{i+1}..a_{i+16} (the most wakes a policy has): every app reaches every
// later one, by many paths.
func denseChain(n int) []*routingv1alpha1.RoutePolicy {
	out := make([]*routingv1alpha1.RoutePolicy, n)
	for i := range out {
		p := &routingv1alpha1.RoutePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: fmt.Sprintf("p%d", i)}}
		p.Spec.App = fmt.Sprintf("a%d", i)
		for j := i + 1; j <= i+16 && j < n; j++ {
			p.Spec.Wakes = append(p.Spec.Wakes, routingv1alpha1.Dependency{App: fmt.Sprintf("a%d", j)})
		}
		out[i] = p
	}
	return out
}

// What one reconcile of the route controller reads for its status
// (dependencies) and spec (withWakes), and what the policy controller's
// map function reads, counted in cache Lists: each app's policies are
// listed once per walk, not once per app of the status tree (it was 65
// walks of the whole graph: 19,000 Lists for n=300).
func TestDependencyWalkListsEachAppOnce(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := routingv1alpha1.AddToScheme(scheme, "ebb.dev"); err != nil {
		t.Fatal(err)
	}
	const n = 300
	var objs []client.Object
	for _, p := range denseChain(n) {
		objs = append(objs, p, &routingv1alpha1.AppRoute{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: p.Spec.App}})
	}
	var lists atomic.Int64
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithIndex(&routingv1alpha1.RoutePolicy{}, policyAppIndex, func(o client.Object) []string { return []string{o.(*routingv1alpha1.RoutePolicy).Spec.App} }).
		WithIndex(&routingv1alpha1.RoutePolicy{}, policyWakesIndex, indexWakes).
		WithInterceptorFuncs(interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, l client.ObjectList, o ...client.ListOption) error {
			lists.Add(1)
			return c.List(ctx, l, o...)
		}}).Build()
	p := &policies{client: c}
	r := &routeReconciler{routes: &routes{client: c, policies: p}}
	ctx := context.Background()

	deps, err := r.dependencies(ctx, appKey{"x", "a0"})
	if err != nil {
		t.Fatal(err)
	}
	if len(deps) != maxDependencies {
		t.Errorf("dependencies(a0): %d entries, want %d", len(deps), maxDependencies)
	}
	t.Logf("dependencies(a0): %d Lists", lists.Load())
	if got := lists.Load(); got > 2*n {
		t.Errorf("dependencies(a0) listed RoutePolicies %d times for %d apps, want at most %d", got, n, 2*n)
	}

	lists.Store(0)
	route := &routingv1alpha1.AppRoute{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "a0"}}
	if err := p.withWakes(ctx, route, objs[0].(*routingv1alpha1.RoutePolicy)); err != nil {
		t.Fatal(err)
	}
	if len(route.Spec.Wakes) != 16 {
		t.Errorf("withWakes(a0) copied %d wakes, want 16", len(route.Spec.Wakes))
	}
	t.Logf("withWakes(a0): %d Lists", lists.Load())
	if got := lists.Load(); got > 2*n {
		t.Errorf("withWakes(a0) listed RoutePolicies %d times for %d apps, want at most %d", got, n, 2*n)
	}

	lists.Store(0)
	last := objs[2*(n-1)].(*routingv1alpha1.RoutePolicy)
	if reqs := (&policyReconciler{policies: p}).policiesNeeding(ctx, last); len(reqs) != n-1 {
		t.Errorf("policiesNeeding(a%d): %d requests, want %d", n-1, len(reqs), n-1)
	}
	t.Logf("policiesNeeding(a%d): %d Lists", n-1, lists.Load())
	if got := lists.Load(); got > 2*n {
		t.Errorf("policiesNeeding(a%d) listed RoutePolicies %d times for %d apps, want at most %d", n-1, got, n, 2*n)
	}
}

// copyCountingCache answers Lists with one field selector as the
// manager's cache does (an index lookup, a deep copy of each hit unless
// UnsafeDisableDeepCopy), counting the copies; its Get finds every
// AppRoute, at zero and without a workload.
type copyCountingCache struct {
	client.Client
	idx    toolscache.Indexer
	copies int
}

func (c *copyCountingCache) List(_ context.Context, l client.ObjectList, opts ...client.ListOption) error {
	o := &client.ListOptions{}
	o.ApplyOptions(opts)
	req := o.FieldSelector.Requirements()[0]
	val := req.Value
	if o.Namespace != "" {
		val = o.Namespace + "/" + val
	}
	objs, err := c.idx.ByIndex("field:"+req.Field, val)
	if err != nil {
		return err
	}
	out := l.(*routingv1alpha1.RoutePolicyList)
	out.Items = out.Items[:0]
	for _, x := range objs {
		pol := x.(*routingv1alpha1.RoutePolicy)
		if o.UnsafeDisableDeepCopy == nil || !*o.UnsafeDisableDeepCopy {
			pol = pol.DeepCopy()
			c.copies++
		}
		out.Items = append(out.Items, *pol)
	}
	return nil
}

func (c *copyCountingCache) Get(_ context.Context, k client.ObjectKey, o client.Object, _ ...client.GetOption) error {
	o.SetName(k.Name)
	o.SetNamespace(k.Namespace)
	return nil
}

// The reviewer's case: 1024 policies, a readiness change of a1023
// reconciles its 1023 dependents, each computing its status.dependencies.
// One of them took 459 ms (3 min for all, on the controller's 4 workers
// that serve every namespace); the walks now copy nothing from the cache
// and list each app once.
func TestDependencyWalkCostOfATenantsGraph(t *testing.T) {
	const n = maxWalk
	idx := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{
		"field:" + policyAppIndex: func(o any) ([]string, error) {
			p := o.(*routingv1alpha1.RoutePolicy)
			return []string{p.Namespace + "/" + p.Spec.App}, nil
		},
		"field:" + policyWakesIndex: func(o any) ([]string, error) { return indexWakes(o.(*routingv1alpha1.RoutePolicy)), nil },
	})
	for _, p := range denseChain(n) {
		if err := idx.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	c := &copyCountingCache{idx: idx}
	p := &policies{client: c}
	r := &routeReconciler{routes: &routes{client: c, policies: p}}
	ctx := context.Background()
	start := time.Now()
	if _, err := r.dependencies(ctx, appKey{"x", "a0"}); err != nil {
		t.Fatal(err)
	}
	one := time.Since(start)
	t.Logf("dependencies(a0) over %d apps: %v", n, one)
	if c.copies != 0 {
		t.Errorf("dependencies(a0) deep-copied %d RoutePolicies from the cache, want none (it only reads them)", c.copies)
	}
	if one > 100*time.Millisecond {
		t.Errorf("dependencies(a0) took %v, want well under 100ms (it took 459ms)", one)
	}
	last, err := c.idx.ByIndex("field:"+policyAppIndex, fmt.Sprintf("x/a%d", n-1))
	if err != nil || len(last) != 1 {
		t.Fatal(last, err)
	}
	if reqs := (&policyReconciler{policies: p}).policiesNeeding(ctx, last[0].(*routingv1alpha1.RoutePolicy)); len(reqs) != n-1 || c.copies != 0 {
		t.Errorf("policiesNeeding(a%d): %d requests (want %d), %d RoutePolicies deep-copied from the cache (want none)", n-1, len(reqs), n-1, c.copies)
	}
	dependents := p.dependents(ctx, appKey{"x", fmt.Sprintf("a%d", n-1)})
	start = time.Now()
	for _, k := range dependents {
		if _, err := r.dependencies(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	all := time.Since(start)
	t.Logf("dependencies() of all %d dependents of a%d, one after another: %v", len(dependents), n-1, all)
	if all > 20*time.Second {
		t.Errorf("the %d dependents' dependencies() took %v, want under 20s", len(dependents), all)
	}
}

func newCacheOf(t *testing.T, pols []*routingv1alpha1.RoutePolicy) *copyCountingCache {
	t.Helper()
	idx := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{
		"field:" + policyAppIndex: func(o any) ([]string, error) {
			p := o.(*routingv1alpha1.RoutePolicy)
			return []string{p.Namespace + "/" + p.Spec.App}, nil
		},
		"field:" + policyWakesIndex: func(o any) ([]string, error) { return indexWakes(o.(*routingv1alpha1.RoutePolicy)), nil },
	})
	for _, p := range pols {
		if err := idx.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	return &copyCountingCache{idx: idx}
}

// onCycle (one walk for every app reached) says of each app what
// policyCycle (a breadth-first search from that app) says, on random
// graphs with cycles, self-wakes and superseded policies.
func TestOnCycleAgreesWithPolicyCycle(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 31))
	ctx := context.Background()
	for round := range 300 {
		const apps = 8
		var pols []*routingv1alpha1.RoutePolicy
		for i := range apps + rng.IntN(4) {
			p := &routingv1alpha1.RoutePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: fmt.Sprintf("p%d", i)}}
			p.Spec.App = fmt.Sprintf("a%d", i%apps) // some apps get a second policy
			for j := range apps {
				if rng.IntN(6) == 0 {
					p.Spec.Wakes = append(p.Spec.Wakes, routingv1alpha1.Dependency{App: fmt.Sprintf("a%d", j)})
				}
			}
			pols = append(pols, p)
		}
		p := &policies{client: newCacheOf(t, pols)}
		cyclic, err := p.walk(types.NamespacedName{}).onCycle(ctx, appKey{"x", "a0"})
		if err != nil {
			t.Fatal(err)
		}
		for _, pol := range pols {
			k := appKey{"x", pol.Spec.App}
			if len(pol.Spec.Wakes) == 0 {
				continue
			}
			cycle, err := p.policyCycle(ctx, pol)
			if err != nil {
				t.Fatal(err)
			}
			reached, err := p.walk(types.NamespacedName{}).onCycle(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			if reached[k] != (cycle != nil) {
				t.Fatalf("round %d: onCycle(%s)[%s] = %v, policyCycle %v", round, k, k, reached[k], cycle)
			}
			if _, in := cyclic[k]; in && cyclic[k] != (cycle != nil) {
				t.Fatalf("round %d: onCycle(a0)[%s] = %v, policyCycle %v", round, k, cyclic[k], cycle)
			}
		}
	}
}

// A policy whose wakes reach more apps than a walk reads is refused at
// admission, naming the bound: a cycle past it would go unseen, and every
// reconcile of the apps needing it would walk the whole graph.
func TestAdmissionRefusesAGraphTooLargeToCheck(t *testing.T) {
	chain := denseChain(maxWalk + 16)
	v := &policyValidator{policies: &policies{client: newCacheOf(t, chain[1:])}}
	ctx := context.Background()
	for _, tc := range []struct {
		pol  *routingv1alpha1.RoutePolicy
		want string
	}{
		{chain[0], fmt.Sprintf("the apps these wakes reach, directly or through others, are more than %d", maxWalk)},
		{chain[maxWalk/2], ""},
	} {
		raw, err := json.Marshal(tc.pol)
		if err != nil {
			t.Fatal(err)
		}
		resp := v.Handle(ctx, admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
			Operation: admissionv1.Create, Namespace: "x", Object: runtime.RawExtension{Raw: raw}}})
		got := ""
		if !resp.Allowed {
			got = resp.Result.Message
		}
		if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
			t.Errorf("admit %s's policy: %q, want %q", tc.pol.Spec.App, got, tc.want)
		}
	}
}
