package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/ebb-dev/ebb/sidecar"
)

func main() {
	opts, err := sidecar.ParseOptions(os.Args[1:], os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ebb-sidecar:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := sidecar.Run(ctx, opts); err != nil {
		fmt.Fprintln(os.Stderr, "ebb-sidecar:", err)
		os.Exit(1)
	}
}
