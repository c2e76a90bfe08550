package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"
)

// run fuzzes each target in turn and stops at the first that fails.
func run(ctx context.Context, o options, out io.Writer) error {
	var raced []string
	for _, t := range o.targets {
		fmt.Fprintf(out, ">> fuzz %s (%s)\n", t, o.fuzztime)
		var got bytes.Buffer
		fuzzErr := goTest(ctx, o.goCmd, io.MultiWriter(out, &got),
			"-run", "^$", "-fuzz", "^"+t.name+"$", "-fuzztime", o.fuzztime.String(), "./"+t.pkg)
		switch {
		case fuzzErr == nil:
			continue
		case ctx.Err() != nil:
			return ctx.Err()
		case !onlyTheCoordinatorsDeadline(got.String(), t.name):
			return fmt.Errorf("%s: %w", t, fuzzErr)
		}
		fmt.Fprintf(out, ">> fuzz %s: go test's only complaint is its own -fuzztime deadline, with no failing input written "+
			"(Go's fuzzing coordinator, golang/go#51484); replaying the target's corpus\n", t)
		if err := goTest(ctx, o.goCmd, out, "-count=1", "-run", "^"+t.name+"$", "./"+t.pkg); err != nil {
			return fmt.Errorf("%s: corpus replay: %w", t, err)
		}
		raced = append(raced, t.String())
	}
	if len(raced) > 0 {
		fmt.Fprintf(out, ">> fuzz: every target passed; %s ended on the coordinator's deadline report and passed on its corpus replay\n",
			strings.Join(raced, ", "))
	}
	return nil
}

func goTest(ctx context.Context, goCmd string, out io.Writer, args ...string) error {
	cmd := exec.CommandContext(ctx, goCmd, append([]string{"test"}, args...)...)
	cmd.Stdout, cmd.Stderr = out, out
	return cmd.Run()
}

// onlyTheCoordinatorsDeadline says whether go test's output for a failed
// fuzz run of target names no failure but the coordinator's bare
// "context deadline exceeded": the target's FAIL line followed only by
// that line, no failing input written, and no other test failed.
func onlyTheCoordinatorsDeadline(output, target string) bool {
	if strings.Contains(output, "Failing input written to") || strings.Contains(output, "panic:") {
		return false
	}
	lines := strings.Split(output, "\n")
	fails := 0
	for i, l := range lines {
		if !strings.HasPrefix(strings.TrimSpace(l), "--- FAIL:") {
			continue
		}
		fails++
		if !strings.HasPrefix(strings.TrimSpace(l), "--- FAIL: "+target+" (") {
			return false
		}
		// The lines the failure printed, up to the package's FAIL line.
		var said []string
		for _, m := range lines[i+1:] {
			m = strings.TrimSpace(m)
			if m == "FAIL" || strings.HasPrefix(m, "FAIL\t") || strings.HasPrefix(m, "exit status ") {
				break
			}
			if m != "" {
				said = append(said, m)
			}
		}
		if len(said) != 1 || said[0] != "context deadline exceeded" {
			return false
		}
	}
	return fails == 1
}
