// Package holdpush is the contract between activators and scalers: an
// activator tells every scaler replica, at once and on every change, how many
// requests it holds per app, and resends its full table periodically so a
// restarted scaler converges. It holds the hand-written gRPC service (no
// protoc: messages use the protobuf wire format through a registered codec),
// the Server a scaler mounts on its gRPC port and the Client an activator
// runs.
package holdpush
