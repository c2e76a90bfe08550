package scaler

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/internal/testwait"
)

// liveHeap is the heap in use after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// appRouteAsServed is an AppRoute as the API server serves it to a watch:
// spec, status with its four conditions, and the managedFields of the
// webhook, the AppRoute controller and the scaler.
func appRouteAsServed(i int) *unstructured.Unstructured {
	name, ns := fmt.Sprintf("app-%04d", i), fmt.Sprintf("team-%02d", i%20)
	cond := func(typ, status, reason, msg string) map[string]any {
		return map[string]any{"type": typ, "status": status, "reason": reason, "message": msg, "observedGeneration": int64(1), "lastTransitionTime": "2026-11-26T06:00:00Z"}
	}
	mf := func(manager, sub string) map[string]any {
		return map[string]any{"manager": manager, "operation": "Apply", "apiVersion": "routing.ebb.dev/v1alpha1", "time": "2026-11-26T06:00:00Z", "fieldsType": "FieldsV1", "subresource": sub,
			"fieldsV1": map[string]any{"f:status": map[string]any{"f:conditions": map[string]any{`k:{"type":"Idle"}`: map[string]any{".": map[string]any{}, "f:lastTransitionTime": map[string]any{}, "f:message": map[string]any{}, "f:observedGeneration": map[string]any{}, "f:reason": map[string]any{}, "f:status": map[string]any{}, "f:type": map[string]any{}}}}}}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "routing.ebb.dev/v1alpha1", "kind": "AppRoute",
		"metadata": map[string]any{"name": name, "namespace": ns, "uid": fmt.Sprintf("4b1c0d6e-0000-4000-8000-%012d", i), "resourceVersion": fmt.Sprint(100000 + i), "generation": int64(1),
			"creationTimestamp": "2026-11-26T06:00:00Z", "labels": map[string]any{"ebb.dev/app": name},
			"managedFields": []any{mf("ebb-webhook", ""), mf("ebb-webhook", "status"), mf("ebb-scaler", "status")}},
		"spec": map[string]any{"appPort": int64(8080), "hosts": []any{name + ".example.com"},
			"scaleTargetRef": map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "name": name}},
		"status": map[string]any{"conditions": []any{
			cond("Admitted", "True", "Admitted", "the hosts are this app's"),
			cond("Propagated", "True", "Propagated", "every activator replica routes the hosts"),
			cond("ScaledByKEDA", "True", "ScaledObjectFound", "ScaledObject "+name+" scales Deployment "+name),
			cond("Idle", "True", ReasonNoRequests, "no request in flight or held, none in the last 1m0s: KEDA may scale the app to zero."),
		}},
	}}
}

// TestStateBytesPerApp: what the scaler holds for an app at zero that KEDA
// asks about: its AppRoute in the cache (slimmed), what KEDA last asked
// (asked) and its registry entry (KEDA keeps a StreamIsActive open per
// app, so the entry stays). The whole AppRoute, as the Idle loop's
// informer cached it, was 9.8 KB on its own (logged beside).
func TestStateBytesPerApp(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector inflates the heap")
	}
	const n = 1000
	served := make([]*unstructured.Unstructured, n)
	for i := range served {
		served[i] = appRouteAsServed(i)
	}
	now := time.Now()

	before := liveHeap()
	whole := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, u := range served {
		if err := whole.Add(u.DeepCopy()); err != nil {
			t.Fatal(err)
		}
	}
	wholePer := (int64(liveHeap()) - int64(before)) / n
	runtime.KeepAlive(whole)
	whole = nil

	before = liveHeap()
	rs := newRoutes(nil, groupsuffix.MustNew(groupsuffix.Default))
	var a asked
	reg := newRegistry()
	for _, u := range served {
		slim, err := slimRoute(u.DeepCopy())
		if err != nil {
			t.Fatal(err)
		}
		if err := rs.inf.GetIndexer().Add(slim); err != nil {
			t.Fatal(err)
		}
		k := appKey{Namespace: u.GetNamespace(), Name: u.GetName()}
		a.set(params{app: k, kind: kindConcurrency, target: 10, window: DefaultRateWindow})
		reg.watch(k, now)
	}
	per := (int64(liveHeap()) - int64(before)) / n
	runtime.KeepAlive(rs)
	runtime.KeepAlive(reg)
	t.Logf("the scaler's state per app at zero: %d bytes (the whole AppRoute in a cache: %d bytes)", per, wholePer)
	if got := rs.get(appKey{Namespace: served[7].GetNamespace(), Name: served[7].GetName()}); got == nil || got.idle == nil || got.idle.Reason != ReasonNoRequests {
		t.Fatalf("the slimmed AppRoute lost its Idle condition: %+v", got)
	}
	const bound = 1536
	if per > bound {
		t.Errorf("%d bytes per app, want under %d", per, bound)
	}
}

// TestStreamBytesPerApp: what an open StreamIsActive costs (KEDA keeps one
// per ScaledObject of an external-push trigger): goroutines, gRPC stream
// state and buffers, measured with both ends in this process, so an upper
// bound of the scaler's part.
func TestStreamBytesPerApp(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector inflates the heap")
	}
	r := newRig(t, nil, nil)
	const n = 1000
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mem := func() uint64 {
		h := liveHeap()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return h + ms.StackInuse
	}
	before := mem()
	streams := make([]externalscaler.ExternalScaler_StreamIsActiveClient, n)
	for i := range streams {
		st, err := r.es.StreamIsActive(ctx, conc(fmt.Sprintf("app-%04d", i)))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); err != nil {
			t.Fatal(err)
		}
		streams[i] = st
	}
	testwait.For(t, 10*time.Second, "every stream watching", func() bool {
		r.s.reg.mu.RLock()
		defer r.s.reg.mu.RUnlock()
		return len(r.s.reg.apps) >= n
	})
	per := (int64(mem()) - int64(before)) / n
	runtime.KeepAlive(streams)
	t.Logf("an open StreamIsActive: %d bytes of heap and stacks, both ends", per)
	const bound = 24 << 10
	if per > bound {
		t.Errorf("%d bytes per stream, want under %d", per, bound)
	}
}
