// Command ebb-sidecar runs package sidecar with the options from its flags and
// environment (ebb-sidecar -h lists them) until SIGTERM.
package main
