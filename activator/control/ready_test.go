package control

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// TestReadyFallsWithoutTheAPIServer: on an idle cluster (no watch event,
// the last full list 5 min old of a 10 min resync) the replica stays
// ready while the API server answers (its pod's GET: NotFound here, an
// answer all the same); cut off from it, the replica turns not ready
// within apiSilence and a probe period, not three resync periods (30 min
// here; 3 min by default); it is ready again at the first answer.
func TestReadyFallsWithoutTheAPIServer(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	var down atomic.Bool
	var gets atomic.Int32
	api := fake.NewClientBuilder().WithScheme(scheme).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			gets.Add(1)
			if down.Load() {
				return errors.New("dial tcp 10.96.0.1:443: i/o timeout")
			}
			return c.Get(ctx, key, obj, opts...)
		},
	}).Build()
	t0 := time.Unix(1_000_000, 0)
	var now atomic.Int64
	now.Store(t0.UnixNano())
	s := &sources{cfg: Config{PodName: "act-a", PodNamespace: "ebb-system", Resync: 10 * time.Minute}, log: logr.Discard(), api: api,
		now: func() time.Time { return time.Unix(0, now.Load()) }}
	s.lastList.Store(t0.Add(-5 * time.Minute).UnixNano())
	s.lastContact.Store(t0.UnixNano())
	// The kubelet probes every 5 s.
	probe := func() (bool, time.Duration) {
		ok := s.synced()
		s.probes.Wait()
		el := time.Duration(now.Load() - t0.UnixNano())
		now.Add(int64(5 * time.Second))
		return ok, el
	}
	for range 60 { // 5 min, the API server answering
		if ok, el := probe(); !ok {
			t.Fatalf("not ready at %v with the API server answering", el)
		}
	}
	if n := gets.Load(); n > 31 {
		t.Errorf("%d GETs in 5 min, want at most one per 10 s", n)
	}
	down.Store(true)
	cut := time.Duration(now.Load() - t0.UnixNano())
	var fell time.Duration = -1
	for range 20 {
		ok, el := probe()
		if !ok {
			fell = el - cut
			break
		}
	}
	if fell < 0 {
		t.Fatal("still ready 100 s after the API server stopped answering")
	}
	t.Logf("not ready %v after the API server stopped answering", fell)
	if fell < apiSilence-apiProbe-5*time.Second || fell > apiSilence+5*time.Second {
		t.Errorf("not ready %v after the API server stopped answering, want within [%v, %v]", fell, apiSilence-apiProbe-5*time.Second, apiSilence+5*time.Second)
	}
	down.Store(false)
	probe() // asks the API server again
	if ok, _ := probe(); !ok {
		t.Error("still not ready after the API server answered again")
	}
}
