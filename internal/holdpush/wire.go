package holdpush

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"

	"github.com/ebb-dev/ebb/internal/holdpush/holdpushpb"
)

// ServiceName is the gRPC service the scaler serves.
const ServiceName = "ebb.holdpush.v1.HoldPush"

// App names an app the way the scaler keys it: the namespace of its pods and
// the value of their <suffix>/app label (the AppRoute name).
type App struct {
	Namespace string
	Name      string
}

func (a App) String() string { return a.Namespace + "/" + a.Name }

// Hold is the number of requests one activator holds for one app right now.
type Hold struct {
	App  App
	Held int64
}

// Batch is one message of a Push stream (holdpushpb.Batch says what each
// field means).
type Batch struct {
	Activator string
	Full      bool
	Holds     []Hold
}

func (b *Batch) toWire() *holdpushpb.Batch {
	w := &holdpushpb.Batch{Activator: b.Activator, Full: b.Full, Holds: make([]*holdpushpb.Hold, len(b.Holds))}
	for i, h := range b.Holds {
		w.Holds[i] = &holdpushpb.Hold{Namespace: h.App.Namespace, App: h.App.Name, Held: h.Held}
	}
	return w
}

func fromWire(w *holdpushpb.Batch) Batch {
	b := Batch{Activator: w.GetActivator(), Full: w.GetFull(), Holds: make([]Hold, len(w.GetHolds()))}
	for i, h := range w.GetHolds() {
		b.Holds[i] = Hold{App: App{Namespace: h.GetNamespace(), Name: h.GetApp()}, Held: h.GetHeld()}
	}
	return b
}

// legacySubtype is the gRPC content-subtype ("application/grpc+<subtype>")
// of the hand-written versions of this protocol, whose scalers read a Push
// only under it. Clients still send it, so that an activator upgraded before
// its scalers keeps reaching them.
const legacySubtype = "ebb-holdpush-v1"

// legacyCodec is gRPC's protobuf codec named legacySubtype. It is passed to
// each call, never registered.
type legacyCodec struct{ encoding.CodecV2 }

func (legacyCodec) Name() string { return legacySubtype }

func callCodec() grpc.CallOption {
	return grpc.ForceCodecV2(legacyCodec{encoding.GetCodecV2(proto.Name)})
}

// ServerOption makes a gRPC server read every message as protobuf whatever
// content-subtype its client names, so that it understands the activators
// that send legacySubtype. Every service ebb serves over gRPC is protobuf.
func ServerOption() grpc.ServerOption {
	return grpc.ForceServerCodecV2(encoding.GetCodecV2(proto.Name))
}

// pushService serves holdpushpb.HoldPush with a Server.
type pushService struct {
	holdpushpb.UnimplementedHoldPushServer
	s *Server
}

func (p pushService) Push(stream grpc.ClientStreamingServer[holdpushpb.Batch, holdpushpb.Ack]) error {
	return p.s.push(stream)
}
