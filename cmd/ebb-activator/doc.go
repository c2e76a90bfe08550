// Command ebb-activator is the activator binary: options from flags and
// environment (ebb-activator -h), then activator.Run until SIGTERM.
package main
