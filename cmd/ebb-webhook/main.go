package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/ebb-dev/ebb/webhook"
)

func main() {
	// Our own flag set: controller-runtime registers --kubeconfig on the
	// global one.
	fs := flag.NewFlagSet(os.Args[0], flag.ExitOnError)
	opts := webhook.DefaultOptions()
	opts.BindFlags(fs)
	_ = fs.Parse(os.Args[1:]) // ExitOnError: never returns an error
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := webhook.Run(ctx, opts); err != nil {
		fmt.Fprintln(os.Stderr, "ebb-webhook:", err)
		stop()
		os.Exit(1)
	}
}
