package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/ebb-dev/ebb/activator"
)

func main() {
	opts, err := activator.ParseOptions(os.Args[1:], os.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		activator.Usage(os.Stdout)
		return
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "ebb-activator: %v\n", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := activator.Run(ctx, opts); err != nil {
		fmt.Fprintf(os.Stderr, "ebb-activator: %v\n", err)
		os.Exit(1)
	}
}
