package main

import (
	"context"
	"os"
	"os/signal"
	"runtime"
	"syscall"
)

func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

func runtimeCPUs() int { return runtime.NumCPU() }
