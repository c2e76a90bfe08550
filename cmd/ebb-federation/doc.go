// Command ebb-federation runs package federation with the options from its
// flags and environment (ebb-federation -h lists them) until SIGTERM.
package main
