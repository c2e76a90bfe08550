// Command ebb-scaler parses its options (flags with EBB_SCALER_* environment
// fallbacks) and runs scaler.Run until SIGTERM; everything else lives in
// package scaler.
package main
