// Command ebb-scaler runs package scaler with the options from its flags and
// environment (ebb-scaler -h lists them) until SIGTERM.
package main
