package holdpush

import (
	"bytes"
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"

	"github.com/ebb-dev/ebb/internal/holdpush/holdpushpb"
	"github.com/ebb-dev/ebb/internal/testwait"
)

func TestWireRoundTrip(t *testing.T) {
	for name, b := range map[string]Batch{
		"empty":       {Holds: []Hold{}},
		"full, empty": {Activator: "ebb-system/activator-0", Full: true, Holds: []Hold{}},
		"changes": {Activator: "ebb-system/activator-1", Holds: []Hold{
			{App: App{"shop", "hello"}, Held: 3},
			{App: App{"shop", "cart"}, Held: 0},
			{App: App{"a", "b"}, Held: 1 << 40},
		}},
	} {
		t.Run(name, func(t *testing.T) {
			raw, err := proto.Marshal(b.toWire())
			if err != nil {
				t.Fatal(err)
			}
			var w holdpushpb.Batch
			if err := proto.Unmarshal(raw, &w); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(b, fromWire(&w)); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWireRejectsGarbage(t *testing.T) {
	for _, raw := range [][]byte{{0xff}, {0x0a, 0x05, 'a'}, {0x1a, 0x02, 0x18}} {
		var w holdpushpb.Batch
		if err := proto.Unmarshal(raw, &w); err == nil {
			t.Errorf("Unmarshal(%x) accepted a malformed message", raw)
		}
	}
}

// goldenBatch is a Batch on the wire: activator "a/b", full, shop/hello
// holding 3. A change to these bytes breaks the activators and scalers of a
// release running side by side during an upgrade.
var goldenBatch = []byte{
	0x0a, 0x03, 'a', '/', 'b', // 1: activator
	0x10, 0x01, // 2: full
	0x1a, 0x0f, // 3: hold, 15 bytes
	0x0a, 0x04, 's', 'h', 'o', 'p', // 1: namespace
	0x12, 0x05, 'h', 'e', 'l', 'l', 'o', // 2: app
	0x18, 0x03, // 3: held
}

func TestBatchGoldenBytes(t *testing.T) {
	b := Batch{Activator: "a/b", Full: true, Holds: []Hold{{App: hello, Held: 3}}}
	raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(b.toWire())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(goldenBatch, raw); diff != "" {
		t.Errorf("wire bytes (-golden +generated):\n%s", diff)
	}
}

// rawCodec passes a message's bytes through as they are on the wire.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }

// TestPushOnTheWire: the Client sends the golden bytes on the method
// /ebb.holdpush.v1.HoldPush/Push as gRPC's protobuf (application/grpc), and
// a Server reads them from a client that writes them by hand.
func TestPushOnTheWire(t *testing.T) {
	type call struct{ method, contentType string }
	calls := make(chan call, 16)
	got := make(chan []byte, 16)
	gs := grpc.NewServer(grpc.ForceServerCodecV2(rawCodec{}), grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
		method, _ := grpc.MethodFromServerStream(ss)
		md, _ := metadata.FromIncomingContext(ss.Context())
		calls <- call{method, strings.Join(md.Get("content-type"), ",")}
		for {
			var b []byte
			if err := ss.RecvMsg(&b); err != nil {
				return err
			}
			got <- b
		}
	}))
	lis := bufconn.Listen(1 << 20)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	c, err := NewClient(ClientOptions{Activator: "a/b", DialOptions: []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	c.Set(hello, 3)
	c.SetAddresses([]string{"passthrough:///raw-scaler"})
	if got, want := <-calls, (call{"/ebb.holdpush.v1.HoldPush/Push", "application/grpc"}); got != want {
		t.Errorf("the client's call %+v, want %+v", got, want)
	}
	deadline := time.After(5 * time.Second)
	for found := false; !found; {
		select {
		case b := <-got:
			found = bytes.Equal(b, goldenBatch)
		case <-deadline:
			t.Fatal("the golden batch never came")
		}
	}

	r := newRig(t, ServerOptions{})
	conn, err := grpc.NewClient("passthrough:///scaler-0", grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithContextDialer(r.dial))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	cs, err := conn.NewStream(t.Context(), &holdpushpb.HoldPush_ServiceDesc.Streams[0], "/ebb.holdpush.v1.HoldPush/Push", grpc.ForceCodecV2(rawCodec{}))
	if err != nil {
		t.Fatal(err)
	}
	msg := goldenBatch
	if err := cs.SendMsg(&msg); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 5*time.Second, "hello=3 from the golden bytes", func() bool { return r.server().Held(hello) == 3 })
	if err := cs.CloseSend(); err != nil {
		t.Fatal(err)
	}
	var ack []byte
	if err := cs.RecvMsg(&ack); err != nil {
		t.Fatalf("the stream's end: %v", err)
	}
}

// rig is a scaler-side Server behind a bufconn listener that a test can
// restart at the same address.
type rig struct {
	t    *testing.T
	mu   sync.Mutex
	lis  *bufconn.Listener
	gs   *grpc.Server
	srv  *Server
	opts ServerOptions
}

func newRig(t *testing.T, opts ServerOptions) *rig {
	r := &rig{t: t, opts: opts}
	r.start()
	t.Cleanup(r.stop)
	return r
}

func (r *rig) start() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lis = bufconn.Listen(1 << 20)
	r.gs = grpc.NewServer()
	r.srv = NewServer(r.opts)
	r.srv.Register(r.gs)
	go func(gs *grpc.Server, lis net.Listener) { _ = gs.Serve(lis) }(r.gs, r.lis)
}

func (r *rig) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gs.Stop()
	r.srv.Close()
}

func (r *rig) server() *Server {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.srv
}

func (r *rig) dial(ctx context.Context, _ string) (net.Conn, error) {
	r.mu.Lock()
	lis := r.lis
	r.mu.Unlock()
	return lis.DialContext(ctx)
}

func (r *rig) client(activator string, resend time.Duration) *Client {
	c, err := NewClient(ClientOptions{Activator: activator, Resend: resend, DialOptions: []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(r.dial),
	}})
	if err != nil {
		r.t.Fatal(err)
	}
	c.SetAddresses([]string{"passthrough:///scaler-0"})
	r.t.Cleanup(c.Close)
	return c
}

var hello, cart = App{"shop", "hello"}, App{"shop", "cart"}

func TestActivatorsAreSummed(t *testing.T) {
	var mu sync.Mutex
	seen := map[App][]int64{}
	r := newRig(t, ServerOptions{OnChange: func(a App, n int64) {
		mu.Lock()
		seen[a] = append(seen[a], n)
		mu.Unlock()
	}})
	a0, a1 := r.client("ebb-system/activator-0", time.Hour), r.client("ebb-system/activator-1", time.Hour)

	a0.Set(hello, 2)
	testwait.For(t, 5*time.Second, "hello=2", func() bool { return r.server().Held(hello) == 2 })
	a1.Set(hello, 3)
	testwait.For(t, 5*time.Second, "hello=5", func() bool { return r.server().Held(hello) == 5 })
	a0.Set(hello, 0)
	a1.Set(cart, 1)
	testwait.For(t, 5*time.Second, "hello=3, cart=1", func() bool { return r.server().Held(hello) == 3 && r.server().Held(cart) == 1 })

	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff(map[App][]int64{hello: {2, 5, 3}, cart: {1}}, seen); diff != "" {
		t.Errorf("OnChange calls (-want +got):\n%s", diff)
	}
	want := []ActivatorStatus{{Activator: "ebb-system/activator-0", Streams: 1}, {Activator: "ebb-system/activator-1", Streams: 1, Apps: 2, Held: 4}}
	if diff := cmp.Diff(want, r.server().Activators()); diff != "" {
		t.Errorf("Activators (-want +got):\n%s", diff)
	}
}

func TestRestartedScalerConverges(t *testing.T) {
	r := newRig(t, ServerOptions{})
	c := r.client("ebb-system/activator-0", time.Hour)
	c.Set(hello, 4)
	c.Set(cart, 1)
	testwait.For(t, 5*time.Second, "first scaler has both apps", func() bool { return r.server().Held(hello) == 4 && r.server().Held(cart) == 1 })

	r.stop()
	r.start() // a new, empty scaler at the same address
	testwait.For(t, 5*time.Second, "restarted scaler has both apps without a new Set", func() bool {
		return r.server().Held(hello) == 4 && r.server().Held(cart) == 1
	})
}

func TestPeriodicResendRepairs(t *testing.T) {
	r := newRig(t, ServerOptions{})
	c := r.client("ebb-system/activator-0", 20*time.Millisecond)
	c.Set(hello, 2)
	testwait.For(t, 5*time.Second, "hello=2", func() bool { return r.server().Held(hello) == 2 })
	// A scaler that lost track (here: cleared by hand) is repaired by the
	// next full resend, with no change on the activator.
	srv := r.server()
	srv.mu.Lock()
	srv.setLocked(srv.activators["ebb-system/activator-0"], hello, 0)
	srv.mu.Unlock()
	testwait.For(t, 5*time.Second, "hello=2 again", func() bool { return r.server().Held(hello) == 2 })
}

func TestCountsDroppedAfterGrace(t *testing.T) {
	dropped := make(chan string, 1)
	const grace = 300 * time.Millisecond
	r := newRig(t, ServerOptions{Grace: grace, OnDrop: func(a string, _ int) { dropped <- a }})
	c := r.client("ebb-system/activator-0", time.Hour)
	c.Set(hello, 7)
	testwait.For(t, 5*time.Second, "hello=7", func() bool { return r.server().Held(hello) == 7 })

	closed := time.Now()
	c.Close()
	if got := r.server().Held(hello); got != 7 && time.Since(closed) < grace/2 {
		t.Errorf("right after the stream ended, hello = %d, want 7 (kept during the grace)", got)
	}
	select {
	case a := <-dropped:
		if a != "ebb-system/activator-0" {
			t.Errorf("dropped %q", a)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("counts never dropped")
	}
	if waited := time.Since(closed); waited < grace-50*time.Millisecond {
		t.Errorf("dropped after %s, before the %s grace", waited, grace)
	}
	if got := r.server().Held(hello); got != 0 {
		t.Errorf("after the grace, hello = %d, want 0", got)
	}
}

func TestReconnectWithinGraceKeepsCounts(t *testing.T) {
	var mu sync.Mutex
	var changes []int64
	r := newRig(t, ServerOptions{Grace: time.Hour, OnChange: func(_ App, n int64) {
		mu.Lock()
		changes = append(changes, n)
		mu.Unlock()
	}})
	old := r.client("ebb-system/activator-0", time.Hour)
	old.Set(hello, 3)
	testwait.For(t, 5*time.Second, "hello=3", func() bool { return r.server().Held(hello) == 3 })
	old.Close()
	again := r.client("ebb-system/activator-0", time.Hour)
	again.Set(hello, 3)
	again.Set(cart, 1)
	testwait.For(t, 5*time.Second, "cart=1", func() bool { return r.server().Held(cart) == 1 })
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff([]int64{3, 1}, changes); diff != "" {
		t.Errorf("OnChange totals (-want +got), hello must never drop to 0:\n%s", diff)
	}
}

// rawStream is a Push stream whose batches the test writes itself.
func rawStream(t *testing.T, r *rig) *batchStream {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///scaler-0", grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithContextDialer(r.dial))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	cs, err := holdpushpb.NewHoldPushClient(conn).Push(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return &batchStream{cs}
}

type batchStream struct {
	grpc.ClientStreamingClient[holdpushpb.Batch, holdpushpb.Ack]
}

func (s *batchStream) SendMsg(b *Batch) error { return s.Send(b.toWire()) }

func TestBadBatchRejected(t *testing.T) {
	for name, tc := range map[string]struct {
		batches []Batch
		want    string
	}{
		"no activator":      {[]Batch{{Holds: []Hold{{App: hello, Held: 1}}}}, "batch names no activator: set ClientOptions.Activator to the activator pod's namespace/name"},
		"negative":          {[]Batch{{Activator: "a", Holds: []Hold{{App: hello, Held: -1}}}}, "hold for shop/hello is -1: held counts cannot be negative"},
		"no app name":       {[]Batch{{Activator: "a", Holds: []Hold{{App: App{Namespace: "shop"}, Held: 1}}}}, `hold 1 for "shop/": both namespace and app name are required`},
		"activator changed": {[]Batch{{Activator: "a"}, {Activator: "b"}}, `activator changed within a stream from "a" to "b": open one stream per activator`},
	} {
		t.Run(name, func(t *testing.T) {
			r := newRig(t, ServerOptions{})
			cs := rawStream(t, r)
			for i := range tc.batches {
				_ = cs.SendMsg(&tc.batches[i])
			}
			err := cs.RecvMsg(&holdpushpb.Ack{})
			if st := status.Convert(err); st.Code() != codes.InvalidArgument || st.Message() != tc.want {
				t.Errorf("stream ended with %v, want InvalidArgument %q", err, tc.want)
			}
			if got := r.server().Held(hello); got != 0 {
				t.Errorf("a rejected batch changed hello to %d", got)
			}
		})
	}
}

func TestSilentStreamIsCut(t *testing.T) {
	r := newRig(t, ServerOptions{StaleAfter: 200 * time.Millisecond, Grace: 100 * time.Millisecond})
	cs := rawStream(t, r)
	if err := cs.SendMsg(&Batch{Activator: "a", Full: true, Holds: []Hold{{App: hello, Held: 2}}}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 5*time.Second, "hello=2", func() bool { return r.server().Held(hello) == 2 })
	start := time.Now()
	err := cs.RecvMsg(&holdpushpb.Ack{})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("silent stream ended with %v, want DeadlineExceeded", err)
	}
	testwait.For(t, 5*time.Second, "hello dropped", func() bool { return r.server().Held(hello) == 0 })
	if took := time.Since(start); took < 150*time.Millisecond {
		t.Errorf("silent stream cut after %s, want about StaleAfter+Grace", took)
	}
}
