package options

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Main is every ebb binary's main: it parses the options (-h prints Usage
// to stdout and exits 0; bad options print every problem and exit 2), then
// runs until SIGTERM or SIGINT cancels the context (a run error exits 1).
func Main[O any](program string, parse func(args []string, getenv func(string) string) (O, error), usage func(io.Writer), run func(context.Context, O) error) {
	opts, err := parse(os.Args[1:], os.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		usage(os.Stdout)
		return
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: invalid options (-h lists them):\n%v\n", program, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err = run(ctx, opts)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", program, err)
		os.Exit(1)
	}
}
