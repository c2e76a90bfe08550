// Command ebb-activator runs package activator with the options from its flags and
// environment (ebb-activator -h lists them) until SIGTERM.
package main
