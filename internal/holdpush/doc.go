// Package holdpush is the contract between activators and scalers: an
// activator tells every scaler replica, at once and on every change, how many
// requests it holds per app, and resends its full table periodically so a
// restarted scaler converges. The protocol is holdpushpb/holdpush.proto
// (generated code, `make generate`); this package holds the Server a scaler
// mounts on its gRPC port and the Client an activator runs.
//
// On the wire a Push is the gRPC method /ebb.holdpush.v1.HoldPush/Push with
// gRPC's protobuf codec (content-type application/grpc); TestPushOnTheWire
// pins its bytes. Change holdpush.proto only as protobuf allows a field to
// change: activators and scalers of two releases run side by side during an
// upgrade.
package holdpush
