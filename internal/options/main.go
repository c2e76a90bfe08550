package options

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// Main is every ebb binary's main: it parses the options over defaults (-h
// prints their usage to stdout and exits 0; bad options print every
// problem and exit 2), then runs until SIGTERM or SIGINT cancels the
// context (a run error exits 1).
func Main[T any, P interface {
	*T
	Options
}](program string, defaults func() T, run func(context.Context, T) error) {
	opts, err := Parse[T, P](program, defaults(), os.Args[1:], os.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		WriteUsage[T, P](os.Stdout, program, defaults())
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
