// Command ebb-sidecar is ebb's per-pod counting reverse proxy: it parses
// its options (flags with env fallbacks), runs sidecar.Run until SIGTERM or
// an interrupt, and exits non-zero on error. See package
// github.com/ebb-dev/ebb/sidecar for what it does and every option.
package main
