package control

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// TestColdWatchReturnsAtOnceWhileDiscoveryHangs guards the contract of
// the cold-start watcher's Watch, which the proxy calls under the app's
// mutex when a cold start begins: it returns at once, for a StatefulSet
// (whose mapping is fixed) and for a --scale-targets kind (whose mapping
// the lazy REST mapper finds through API discovery) alike, however slow
// the API server is. Before, the discovery round trip ran inside Watch,
// with no deadline, stalling the app's admissions that long.
func TestColdWatchReturnsAtOnceWhileDiscoveryHangs(t *testing.T) {
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select { // a slow or overloaded API server
		case <-time.After(2 * time.Second):
		case <-r.Context().Done():
		case <-stop:
		}
		http.NotFound(w, r)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(stop) })
	rc := &rest.Config{Host: srv.URL}
	hc, err := rest.HTTPClientFor(rc)
	if err != nil {
		t.Fatal(err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(rc, hc)
	if err != nil {
		t.Fatal(err)
	}
	kube, err := kubernetes.NewForConfigAndClient(rc, hc)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfigAndClient(rc, hc)
	if err != nil {
		t.Fatal(err)
	}
	w := &apiWatcher{kube: kube, dyn: dyn, mapper: mapper, appLabel: "ebb.dev/app", log: logr.Discard()}
	for _, target := range []string{"StatefulSet.apps/ledger", "Worker.example.com/ledger"} {
		t.Run(target, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			defer cancel()
			start := time.Now()
			w.Watch(ctx, "shop", "ledger", target, time.Now(), func(int, time.Time) {})
			if d := time.Since(start); d > 200*time.Millisecond {
				t.Errorf("Watch(%s) took %v with API discovery hanging; want it to return at once", target, d.Round(time.Millisecond))
			}
		})
	}
}
