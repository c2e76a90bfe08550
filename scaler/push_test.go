package scaler

import (
	"context"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/internal/holdpush"
	"github.com/ebb-dev/ebb/internal/testwait"
)

func recvActive(t *testing.T, st grpc.ServerStreamingClient[externalscaler.IsActiveResponse]) bool {
	t.Helper()
	resp, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	return resp.Result
}

// The first held request of an app at zero reaches KEDA's open
// StreamIsActive within 20 ms (p99), without waiting for a tick. Released,
// the requests keep the app active for its rate window (here one tick,
// 10 ms): the stream says false at the first tick after it.
func TestHeldPushReachesStreamAtOnce(t *testing.T) {
	const window = 10 * time.Millisecond
	r := newRig(t, nil, func(o *Options) { o.Tick = window })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	so := ref(map[string]string{"app": "cold", "targetConcurrency": "10", "rateWindow": window.String()})
	st, err := r.es.StreamIsActive(ctx, so)
	if err != nil {
		t.Fatal(err)
	}
	if recvActive(t, st) {
		t.Fatal("cold app active before anything was held")
	}
	c := r.pushClient("ebb-system/activator-0")
	cold := holdpush.App{Namespace: ns, Name: "cold"}
	const n = 200
	lat := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		c.Set(cold, 1)
		if !recvActive(t, st) {
			t.Fatal("stream sent false after a held request")
		}
		lat = append(lat, time.Since(start))
		c.Set(cold, 0)
		testwait.For(t, 10*time.Second, "the release reaches the registry", func() bool { return r.status("cold").Held == 0 })
		time.Sleep(window)
		r.tick()
		if recvActive(t, st) {
			t.Fatal("stream sent true after the held request left and the window passed")
		}
	}
	slices.Sort(lat)
	if p99 := lat[n*99/100]; p99 > 20*time.Millisecond {
		t.Errorf("held push → StreamIsActive p99 = %s, want ≤ 20ms (p50 %s)", p99, lat[n/2])
	}
}

// A dead activator does not pin an app active: its counts go after the
// grace, and the app is inactive once its rate window has passed after
// that (the requests it held count as recent, as any released ones).
func TestActivatorGoneReleasesApp(t *testing.T) {
	const window = 100 * time.Millisecond
	r := newRig(t, nil, func(o *Options) { o.HoldGrace = 100 * time.Millisecond; o.Tick = 10 * time.Millisecond })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	so := ref(map[string]string{"app": "cold", "targetConcurrency": "10", "rateWindow": window.String()})
	st, err := r.es.StreamIsActive(ctx, so)
	if err != nil {
		t.Fatal(err)
	}
	recvActive(t, st)
	c := r.pushClient("ebb-system/activator-0")
	c.Set(holdpush.App{Namespace: ns, Name: "cold"}, 3)
	if !recvActive(t, st) {
		t.Fatal("not active while held")
	}
	gone := time.Now()
	c.Close()
	testwait.For(t, 5*time.Second, "the dead activator's counts dropped", func() bool { return r.status("cold").Held == 0 })
	if waited := time.Since(gone); waited < 80*time.Millisecond {
		t.Errorf("counts dropped after %s, before the 100ms grace", waited)
	}
	time.Sleep(window)
	r.tick()
	if recvActive(t, st) {
		t.Fatal("stream sent true again")
	}
	// The drop is counted just after the counts go (outside the server's
	// lock), so the stream may say so first.
	testwait.For(t, time.Second, metricActivatorDropped+" = 1", func() bool { return r.metricValue(metricActivatorDropped) == 1 })
}

// Two replicas, each reading everything and each pushed to, answer alike.
func TestTwoScalersAgree(t *testing.T) {
	a, b := newSidecar(t, 3, 100, 1), newSidecar(t, 0, 7, 1)
	client := fake.NewClientset(appPod("hello-0", "hello", a), appPod("hello-1", "hello", b), appPod("legacy-0", "legacy", nil))
	r1, r2 := newRig(t, client, nil), newRig(t, client, nil)
	r1.addPod(appPod("hello-2", "hello", newSidecar(t, 1, 5, 4)))
	testwait.For(t, 10*time.Second, "second replica sees the new pod", func() bool { return len(r2.s.reg.readable()) == 3 })

	rigs := map[string]*rig{"passthrough:///r1": r1, "passthrough:///r2": r2}
	c, err := holdpush.NewClient(holdpush.ClientOptions{Activator: "ebb-system/activator-0", DialOptions: []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return rigs["passthrough:///"+addr].lis.DialContext(ctx)
		}),
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetAddresses([]string{"passthrough:///r1", "passthrough:///r2"})
	c.Set(holdpush.App{Namespace: ns, Name: "hello"}, 2)
	c.Set(holdpush.App{Namespace: ns, Name: "cold"}, 1)
	for _, r := range []*rig{r1, r2} {
		testwait.For(t, 10*time.Second, "pushes reach both", func() bool {
			return r.s.hold.Held(holdpush.App{Namespace: ns, Name: "cold"}) == 1 && r.s.hold.Held(holdpush.App{Namespace: ns, Name: "hello"}) == 2
		})
	}
	a.set(2, 130, 1)
	b.set(0, 9, 1)
	r1.tick()
	r2.tick()

	type answer struct {
		Metric float64
		Active bool
	}
	answers := func(r *rig) map[string]answer {
		out := map[string]answer{}
		for _, app := range []string{"hello", "cold", "legacy", "nobody"} {
			out[app] = answer{r.metric(conc(app)), r.active(conc(app))}
		}
		return out
	}
	got1, got2 := answers(r1), answers(r2)
	if diff := cmp.Diff(got1, got2); diff != "" {
		t.Errorf("replicas disagree (-r1 +r2):\n%s", diff)
	}
	want := map[string]answer{"hello": {5, true}, "cold": {1, true}, "legacy": {0, true}, "nobody": {0, false}}
	if diff := cmp.Diff(want, got1); diff != "" {
		t.Errorf("answers (-want +got):\n%s", diff)
	}
	if c1, c2 := r1.status("hello").RequestsCounted, r2.status("hello").RequestsCounted; c1 != 32+5 || c2 != c1 {
		t.Errorf("counted: r1 %d, r2 %d; want 37 each (30+2 since the first tick, 5 on the new pod)", c1, c2)
	}
}

// TestReleasedHoldStaysRecent: requests that leave the activator's hold
// (a cold start's, forwarded to the pod now ready) keep the app active
// until the rate window has passed with nothing else, though the sidecar's
// counts do not show them yet: KEDA's stream and IsActive stay true and
// the Idle condition goes from RequestsHeld to RecentRequests, never to
// True in between (it did, a tick after every wake, and back at the next
// read: two Idle writes, the hand-off slice published and removed again).
func TestReleasedHoldStaysRecent(t *testing.T) {
	const window = 400 * time.Millisecond
	sc := newSidecar(t, 0, 10, 1) // the pod's sidecar, its counts not yet showing the released requests
	r := newRig(t, fake.NewClientset(appPod("hello-0", "hello", sc)), func(o *Options) { o.Tick = 50 * time.Millisecond })
	so := ref(map[string]string{"app": "hello", "targetConcurrency": "10", "rateWindow": window.String()})
	k := appKey{Namespace: ns, Name: "hello"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := r.es.StreamIsActive(ctx, so)
	if err != nil {
		t.Fatal(err)
	}
	sent := make(chan bool, 16)
	go func() {
		for {
			resp, err := st.Recv()
			if err != nil {
				close(sent)
				return
			}
			sent <- resp.Result
		}
	}()
	if <-sent {
		t.Fatal("active before anything was held")
	}

	// The Idle loop's decisions, applied to the cached AppRoute as the
	// watch would bring them back.
	names := groupsuffix.MustNew(groupsuffix.Default)
	rts := newRoutes(dynamicfake.NewSimpleDynamicClient(runtime.NewScheme()), names)
	rt := &route{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hello"}}
	if err := rts.inf.GetIndexer().Add(rt); err != nil {
		t.Fatal(err)
	}
	w := newIdleStatus(r.s, nil, rts, names, logr.Discard())
	defer w.queue.ShutDown()
	var writes []string
	idlePass := func() {
		p, fresh := r.s.asked.get(k, time.Now())
		if !fresh {
			t.Fatal("KEDA's ask not remembered")
		}
		if c := w.due(p, time.Now()); c != nil {
			writes = append(writes, string(c.Status)+"/"+c.Reason)
			rt.idle = c
		}
	}

	c := r.pushClient("ebb-system/activator-0")
	c.Set(k, 5)
	if !<-sent {
		t.Fatal("stream sent false after 5 requests were held")
	}
	idlePass()
	c.Set(k, 0)
	testwait.For(t, 10*time.Second, "the release reaches the scaler", func() bool { return r.s.hold.Held(k) == 0 && r.status("hello").Held == 0 })
	released := time.Now()
	for time.Since(released) < window*3/4 {
		r.tick() // the sidecar still says 10 requests, none in flight
		idlePass()
		if !r.active(so) {
			t.Fatalf("IsActive false %s after the held requests left, before the sidecar showed them", time.Since(released))
		}
		select {
		case v := <-sent:
			t.Fatalf("stream sent %v %s after the held requests left, before the window passed", v, time.Since(released))
		default:
		}
		time.Sleep(20 * time.Millisecond)
	}
	if want := []string{"False/" + ReasonRequestsHeld, "False/" + ReasonRecentRequests}; !slices.Equal(writes, want) {
		t.Fatalf("Idle writes until the window passes: %v, want %v", writes, want)
	}

	time.Sleep(time.Until(released.Add(window + 20*time.Millisecond)))
	r.tick() // the window passed with nothing from the sidecar
	select {
	case v := <-sent:
		if v {
			t.Fatal("stream sent true again once the window passed")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("stream sent nothing once the window passed with no request")
	}
	if r.active(so) {
		t.Error("IsActive true once the window passed with no request")
	}
	idlePass()
	if want := "True/" + ReasonNoRequests; writes[len(writes)-1] != want {
		t.Errorf("Idle writes: %v, want the last %s", writes, want)
	}
}
