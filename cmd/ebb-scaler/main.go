package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/ebb-dev/ebb/scaler"
)

func main() {
	opts, err := scaler.ParseOptions(os.Args[1:], os.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		scaler.Usage(os.Stdout)
		return
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "ebb-scaler: %v\n", err)
		scaler.Usage(os.Stderr)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := scaler.Run(ctx, opts); err != nil {
		fmt.Fprintf(os.Stderr, "ebb-scaler: %v\n", err)
		os.Exit(1)
	}
}
