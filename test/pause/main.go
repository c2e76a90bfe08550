// Command pause is the pod sandbox image (ghcr.io/ebb-dev/ebb-pause, built
// by `make images`) for the local cluster's containerd: the process that
// holds a pod's namespaces. It blocks until SIGTERM or SIGINT and then
// exits 0. As PID 1 of a pod that shares its process namespace it reaps
// zombie children: on each SIGCHLD it collects every child that has exited.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	// Two channels: a burst of SIGCHLD must not crowd out SIGTERM. A
	// SIGCHLD dropped while one is pending is harmless, as reap collects
	// every exited child.
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	child := make(chan os.Signal, 1)
	signal.Notify(child, syscall.SIGCHLD)
	for {
		select {
		case <-stop:
			return
		case <-child:
			reap()
		}
	}
}

// reap waits for exited children until none is left to collect.
func reap() {
	for {
		pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if pid <= 0 {
			return
		}
	}
}
