package holdpush

import (
	"google.golang.org/grpc"

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

// pushService serves holdpushpb.HoldPush with a Server.
type pushService struct {
	holdpushpb.UnimplementedHoldPushServer
	s *Server
}

func (p pushService) Push(stream grpc.ClientStreamingServer[holdpushpb.Batch, holdpushpb.Ack]) error {
	return p.s.push(stream)
}
