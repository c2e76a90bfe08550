// Package holdpush is the contract between activators and scalers: an
// activator tells every scaler replica, at once and on every change, how many
// requests it holds per app, and resends its full table periodically so a
// restarted scaler converges. The protocol is holdpushpb/holdpush.proto
// (generated code, `make generate`); this package holds the Server a scaler
// mounts on its gRPC port and the Client an activator runs.
//
// Wire compatibility: clients send the content-subtype ebb-holdpush-v1 of the
// hand-written versions, and a server set up with ServerOption reads any
// subtype as protobuf, so activators and scalers of either kind interoperate
// during an upgrade.
package holdpush
