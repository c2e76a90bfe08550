package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"
)

// target is one fuzz target: its package directory, relative to the
// module root, and its function's name.
type target struct {
	pkg, name string
}

func (t target) String() string { return t.pkg + ":" + t.name }

// options says which targets to fuzz and for how long each.
type options struct {
	fuzztime time.Duration
	goCmd    string
	targets  []target
}

func parseOptions(args []string, getenv func(string) string) (options, error) {
	o := options{fuzztime: 5 * time.Minute, goCmd: "go"}
	fs := flag.NewFlagSet("fuzz", flag.ContinueOnError)
	if v := getenv("FUZZTIME"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return o, fmt.Errorf("FUZZTIME: %w", err)
		}
		o.fuzztime = d
	}
	if v := getenv("GO"); v != "" {
		o.goCmd = v
	}
	fs.DurationVar(&o.fuzztime, "fuzztime", o.fuzztime, "how long to fuzz each target (env FUZZTIME)")
	fs.StringVar(&o.goCmd, "go", o.goCmd, "the go command (env GO)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	var problems []error
	if o.fuzztime <= 0 {
		problems = append(problems, fmt.Errorf("--fuzztime %s: want a positive duration", o.fuzztime))
	}
	if fs.NArg() == 0 {
		problems = append(problems, errors.New("no targets: want <package>:<Target> arguments"))
	}
	for _, a := range fs.Args() {
		pkg, name, ok := strings.Cut(a, ":")
		if !ok || pkg == "" || !strings.HasPrefix(name, "Fuzz") {
			problems = append(problems, fmt.Errorf("target %q: want <package>:Fuzz<Name>", a))
			continue
		}
		o.targets = append(o.targets, target{pkg: pkg, name: name})
	}
	return o, errors.Join(problems...)
}
