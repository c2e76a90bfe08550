// Command ebb-webhook runs package webhook with the options from its flags and
// environment (ebb-webhook -h lists them) until SIGTERM.
package main
