// Package options is the one way ebb's binaries read their configuration:
// a flag per option, each with an environment fallback, every bad value
// refused with the flag's (or variable's) name, and every problem reported
// at once.
//
// Precedence: a flag on the command line wins; then its environment
// variable, EBB_ followed by the flag's name in upper case with '-' as '_'
// (--drain-timeout: EBB_DRAIN_TIMEOUT), unless the option names another
// (--kubeconfig: KUBECONFIG; values from the downward API: POD_NAMESPACE);
// then the default. An empty variable counts as unset.
package options

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// EnvPrefix starts the environment fallback of every flag.
const EnvPrefix = "EBB_"

// EnvName is the environment fallback of the flag called name.
func EnvName(name string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// Set is one program's options. Bind each option with String, Int,
// Duration, Bool or List, then call Parse.
type Set struct {
	program string
	fs      *flag.FlagSet
	getenv  func(string) string
	env     map[string]string // flag name: its environment variable
}

// New starts the options of program, reading the environment through
// getenv (os.Getenv, or a map in tests).
func New(program string, getenv func(string) string) *Set {
	fs := flag.NewFlagSet(program, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return &Set{program: program, fs: fs, getenv: getenv, env: map[string]string{}}
}

// String binds *p to --name; *p holds the default.
func (s *Set) String(p *string, name, usage string) { s.fs.StringVar(p, name, *p, usage) }

// Int binds *p to --name; *p holds the default.
func (s *Set) Int(p *int, name, usage string) { s.fs.IntVar(p, name, *p, usage) }

// Duration binds *p to --name (a Go duration such as 30s); *p holds the
// default.
func (s *Set) Duration(p *time.Duration, name, usage string) { s.fs.DurationVar(p, name, *p, usage) }

// Float64 binds *p to --name; *p holds the default.
func (s *Set) Float64(p *float64, name, usage string) { s.fs.Float64Var(p, name, *p, usage) }

// Bool binds *p to --name (true, false, 1, 0, ...); *p holds the default.
func (s *Set) Bool(p *bool, name, usage string) { s.fs.BoolVar(p, name, *p, usage) }

// List binds *p to --name, a comma-separated list whose empty elements are
// dropped; *p holds the default.
func (s *Set) List(p *[]string, name, usage string) { s.fs.Var((*list)(p), name, usage) }

// Kubeconfig binds *p to --kubeconfig, which falls back to KUBECONFIG.
func (s *Set) Kubeconfig(p *string) {
	s.String(p, "kubeconfig", "kubeconfig path or list of paths; empty means in-cluster, then ~/.kube/config")
	s.Env("kubeconfig", "KUBECONFIG")
}

// KubeAPI binds the client-side limit of the binary's requests to the API
// server to --kube-api-qps and --kube-api-burst (the names KEDA's operator
// uses for its own); *qps and *burst hold the defaults
// (kubeclient.DefaultQPS, kubeclient.DefaultBurst). CheckKubeAPI validates
// them.
func (s *Set) KubeAPI(qps *float64, burst *int) {
	s.Float64(qps, "kube-api-qps", "requests per second this binary may send the API server, shared by its clients (a fleet's status writes drain at this rate); leader election, and the activator's cold-start watcher and recorder, each have a budget of their own of the same size, so a burst never delays a Lease renewal")
	s.Int(burst, "kube-api-burst", "requests this binary may send the API server at once above --kube-api-qps")
}

// CheckKubeAPI returns the problems of --kube-api-qps and --kube-api-burst.
func CheckKubeAPI(qps float64, burst int) error {
	var errs []error
	if !(qps > 0) {
		errs = append(errs, fmt.Errorf("--kube-api-qps %v: must be above 0", qps))
	}
	if burst < 1 {
		errs = append(errs, fmt.Errorf("--kube-api-burst %d: must be at least 1", burst))
	}
	return errors.Join(errs...)
}

// Pod binds the pod's name, namespace and IP to --pod-name,
// --pod-namespace and --pod-ip, which fall back to the variables the
// downward API sets: POD_NAME, POD_NAMESPACE, POD_IP.
func (s *Set) Pod(name, namespace, ip *string) {
	for _, f := range []struct {
		p          *string
		flag, what string
	}{{name, "pod-name", "name"}, {namespace, "pod-namespace", "namespace"}, {ip, "pod-ip", "IP"}} {
		s.String(f.p, f.flag, "this pod's "+f.what+" (downward API)")
		s.Env(f.flag, strings.ToUpper(strings.ReplaceAll(f.flag, "-", "_")))
	}
}

// Env makes the flag called name fall back to the variable env instead of
// EnvName(name). Only for names users already know (KUBECONFIG) and the
// downward API's (POD_NAME, POD_NAMESPACE, POD_IP).
func (s *Set) Env(name, env string) { s.env[name] = env }

func (s *Set) envName(name string) string {
	if e, ok := s.env[name]; ok {
		return e
	}
	return EnvName(name)
}

// Parse reads args (without the program name), then the environment for
// every flag args did not set, then calls validate (if not nil) on the
// result. It returns every problem at once, joined, or an error wrapping
// flag.ErrHelp when args ask for help (write Usage and exit 0).
func (s *Set) Parse(args []string, validate func() error) error {
	if err := s.fs.Parse(args); err != nil {
		return err // flag.ErrHelp for -h; otherwise the flag package names the flag
	}
	var problems []error
	if s.fs.NArg() > 0 {
		problems = append(problems, fmt.Errorf("unexpected arguments %q", s.fs.Args()))
	}
	given := map[string]bool{}
	s.fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	s.fs.VisitAll(func(f *flag.Flag) {
		env := s.envName(f.Name)
		if v := s.getenv(env); v != "" && !given[f.Name] {
			if old := f.Value.String(); f.Value.Set(v) != nil {
				_ = f.Value.Set(old) // the flag package zeroes a bad number; keep the default, which Validate checks
				problems = append(problems, fmt.Errorf("%s=%q (--%s): %s", env, v, f.Name, want(f.Value)))
			}
		}
	})
	if validate != nil {
		problems = append(problems, validate())
	}
	return errors.Join(problems...)
}

// want names what a flag's value must be.
func want(v flag.Value) string {
	g, ok := v.(flag.Getter)
	if !ok {
		return "not a valid value"
	}
	switch g.Get().(type) {
	case int:
		return "not an integer"
	case bool:
		return "not a boolean (true or false)"
	case time.Duration:
		return "not a duration (like 30s or 1m)"
	}
	return "not a valid value"
}

// Options is what a binary's options struct does (through a pointer):
// bind its flags to a Set and check itself, returning every problem at
// once. If it also has a Complete method, Parse calls it before Validate to
// fill the defaults that depend on other options.
type Options interface {
	Bind(s *Set)
	Validate() error
}

type completer interface{ Complete() }

// Parse fills o, which holds the defaults, from args (without the program
// name) and the environment read through getenv, completes and validates
// it. It returns every problem at once, or an error wrapping flag.ErrHelp
// for -h.
func Parse[T any, P interface {
	*T
	Options
}](program string, o T, args []string, getenv func(string) string) (T, error) {
	s := New(program, getenv)
	P(&o).Bind(s)
	err := s.Parse(args, func() error {
		if c, ok := any(P(&o)).(completer); ok {
			c.Complete()
		}
		return P(&o).Validate()
	})
	return o, err
}

// WriteUsage writes program's usage with o's values as the defaults.
func WriteUsage[T any, P interface {
	*T
	Options
}](w io.Writer, program string, o T) {
	s := New(program, func(string) string { return "" })
	P(&o).Bind(s)
	s.Usage(w)
}

// Usage writes how to run the program: every flag, its default and its
// environment variable.
func (s *Set) Usage(w io.Writer) {
	fmt.Fprintf(w, "Usage of %s (a flag wins over its environment variable, which wins over the default):\n", s.program)
	s.fs.VisitAll(func(f *flag.Flag) {
		fmt.Fprintf(w, "  --%s", f.Name)
		if name, _ := flag.UnquoteUsage(f); name != "" {
			fmt.Fprintf(w, " %s", name)
		}
		fmt.Fprintf(w, "\n    \t%s (env %s", f.Usage, s.envName(f.Name))
		if f.DefValue != "" && f.DefValue != "[]" {
			fmt.Fprintf(w, ", default %s", f.DefValue)
		}
		fmt.Fprintln(w, ")")
	})
}

type list []string

func (l *list) String() string {
	if l == nil {
		return ""
	}
	return strings.Join(*l, ",")
}

func (l *list) Set(v string) error {
	*l = nil
	for _, e := range strings.Split(v, ",") {
		if e = strings.TrimSpace(e); e != "" {
			*l = append(*l, e)
		}
	}
	return nil
}

// CheckListen says what is wrong with a listen address: host:port with the
// port a number up to 65535 (0 lets the kernel pick one, as tests do).
func CheckListen(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("port %q: want a number from 0 to 65535", port)
	}
	return nil
}
