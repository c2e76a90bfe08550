package holdpush

import (
	"errors"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/protobuf/encoding/protowire"
)

// The service, written by hand because the module has no protoc step. Its
// messages use the protobuf wire format, so this .proto describes them exactly
// and a generated client in another language would interoperate once it sets
// the content-subtype to CodecName:
//
//	package ebb.holdpush.v1;
//	service HoldPush { rpc Push(stream Batch) returns (Ack); }
//	message Batch { string activator = 1; bool full = 2; repeated Hold holds = 3; }
//	message Hold  { string namespace = 1; string app = 2; int64 held = 3; }
//	message Ack   {}
const (
	ServiceName = "ebb.holdpush.v1.HoldPush"
	pushMethod  = "/" + ServiceName + "/Push"
	// CodecName is the gRPC content-subtype of the service's messages
	// ("application/grpc+ebb-holdpush-v1" on the wire).
	CodecName = "ebb-holdpush-v1"
)

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

// Batch is one message of a Push stream. Activator names the sending
// activator pod and must not change within a stream. A Full batch is the
// activator's whole table: apps it does not list hold nothing. Otherwise the
// batch lists only apps whose count changed (0 = no longer holds any).
type Batch struct {
	Activator string
	Full      bool
	Holds     []Hold
}

// Ack ends a Push stream that the client closed.
type Ack struct{}

func init() { encoding.RegisterCodec(codec{}) }

// codec marshals Batch and Ack in the protobuf wire format. It is registered
// under CodecName, so it only ever sees this service's messages.
type codec struct{}

func (codec) Name() string { return CodecName }

func (codec) Marshal(v any) ([]byte, error) {
	switch m := v.(type) {
	case *Batch:
		return m.appendWire(nil), nil
	case *Ack:
		return nil, nil
	default:
		return nil, fmt.Errorf("holdpush codec: cannot marshal %T", v)
	}
}

func (codec) Unmarshal(data []byte, v any) error {
	switch m := v.(type) {
	case *Batch:
		return m.parseWire(data)
	case *Ack:
		return skipAll(data)
	default:
		return fmt.Errorf("holdpush codec: cannot unmarshal into %T", v)
	}
}

func (b *Batch) appendWire(buf []byte) []byte {
	if b.Activator != "" {
		buf = protowire.AppendTag(buf, 1, protowire.BytesType)
		buf = protowire.AppendString(buf, b.Activator)
	}
	if b.Full {
		buf = protowire.AppendTag(buf, 2, protowire.VarintType)
		buf = protowire.AppendVarint(buf, 1)
	}
	for _, h := range b.Holds {
		var hb []byte
		hb = protowire.AppendTag(hb, 1, protowire.BytesType)
		hb = protowire.AppendString(hb, h.App.Namespace)
		hb = protowire.AppendTag(hb, 2, protowire.BytesType)
		hb = protowire.AppendString(hb, h.App.Name)
		if h.Held != 0 {
			hb = protowire.AppendTag(hb, 3, protowire.VarintType)
			hb = protowire.AppendVarint(hb, uint64(h.Held))
		}
		buf = protowire.AppendTag(buf, 3, protowire.BytesType)
		buf = protowire.AppendBytes(buf, hb)
	}
	return buf
}

var errWire = errors.New("holdpush: malformed message")

func (b *Batch) parseWire(data []byte) error {
	*b = Batch{}
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return fmt.Errorf("%w: %v", errWire, protowire.ParseError(n))
		}
		data = data[n:]
		switch {
		case num == 1 && typ == protowire.BytesType:
			s, n := protowire.ConsumeString(data)
			if n < 0 {
				return fmt.Errorf("%w: activator: %v", errWire, protowire.ParseError(n))
			}
			b.Activator, data = s, data[n:]
		case num == 2 && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(data)
			if n < 0 {
				return fmt.Errorf("%w: full: %v", errWire, protowire.ParseError(n))
			}
			b.Full, data = v != 0, data[n:]
		case num == 3 && typ == protowire.BytesType:
			hb, n := protowire.ConsumeBytes(data)
			if n < 0 {
				return fmt.Errorf("%w: hold: %v", errWire, protowire.ParseError(n))
			}
			h, err := parseHold(hb)
			if err != nil {
				return err
			}
			b.Holds, data = append(b.Holds, h), data[n:]
		default:
			n := protowire.ConsumeFieldValue(num, typ, data)
			if n < 0 {
				return fmt.Errorf("%w: field %d: %v", errWire, num, protowire.ParseError(n))
			}
			data = data[n:]
		}
	}
	return nil
}

func parseHold(data []byte) (Hold, error) {
	var h Hold
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return Hold{}, fmt.Errorf("%w: hold: %v", errWire, protowire.ParseError(n))
		}
		data = data[n:]
		switch {
		case (num == 1 || num == 2) && typ == protowire.BytesType:
			s, n := protowire.ConsumeString(data)
			if n < 0 {
				return Hold{}, fmt.Errorf("%w: hold field %d: %v", errWire, num, protowire.ParseError(n))
			}
			if num == 1 {
				h.App.Namespace = s
			} else {
				h.App.Name = s
			}
			data = data[n:]
		case num == 3 && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(data)
			if n < 0 {
				return Hold{}, fmt.Errorf("%w: held: %v", errWire, protowire.ParseError(n))
			}
			h.Held, data = int64(v), data[n:]
		default:
			n := protowire.ConsumeFieldValue(num, typ, data)
			if n < 0 {
				return Hold{}, fmt.Errorf("%w: hold field %d: %v", errWire, num, protowire.ParseError(n))
			}
			data = data[n:]
		}
	}
	return h, nil
}

func skipAll(data []byte) error {
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return fmt.Errorf("%w: %v", errWire, protowire.ParseError(n))
		}
		data = data[n:]
		if n = protowire.ConsumeFieldValue(num, typ, data); n < 0 {
			return fmt.Errorf("%w: %v", errWire, protowire.ParseError(n))
		}
		data = data[n:]
	}
	return nil
}

// pusher is the handler type of the service; Server implements it.
type pusher interface {
	push(grpc.ServerStream) error
}

var serviceDesc = grpc.ServiceDesc{
	ServiceName: ServiceName,
	HandlerType: (*pusher)(nil),
	Streams: []grpc.StreamDesc{{
		StreamName:    "Push",
		ClientStreams: true,
		Handler: func(srv any, ss grpc.ServerStream) error {
			return srv.(pusher).push(ss)
		},
	}},
	Metadata: "internal/holdpush/wire.go",
}
