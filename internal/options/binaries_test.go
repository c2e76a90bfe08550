package options_test

import (
	"errors"
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/ebb-dev/ebb/activator"
	"github.com/ebb-dev/ebb/check"
	"github.com/ebb-dev/ebb/federation"
	"github.com/ebb-dev/ebb/internal/options"
	"github.com/ebb-dev/ebb/scaler"
	"github.com/ebb-dev/ebb/sidecar"
	"github.com/ebb-dev/ebb/webhook"
)

type binary struct {
	name  string
	parse func(args []string, getenv func(string) string) error
	usage func(io.Writer)
	// kube: it talks to the API server; leader: it elects a leader.
	kube, leader bool
}

func adapt[O any](parse func([]string, func(string) string) (O, error)) func([]string, func(string) string) error {
	return func(args []string, getenv func(string) string) error { _, err := parse(args, getenv); return err }
}

// withArgs gives parse the flags a binary requires before the test's own.
func withArgs(parse func([]string, func(string) string) error, required ...string) func([]string, func(string) string) error {
	return func(args []string, getenv func(string) string) error { return parse(append(required, args...), getenv) }
}

func usage[T any, P interface {
	*T
	options.Options
}](program string, defaults func() T) func(io.Writer) {
	return func(w io.Writer) { options.WriteUsage[T, P](w, program, defaults()) }
}

var binaries = []binary{
	{name: "ebb-sidecar", parse: adapt(sidecar.ParseOptions), usage: usage("ebb-sidecar", sidecar.DefaultOptions)},
	{name: "ebb-activator", parse: adapt(activator.ParseOptions), usage: usage("ebb-activator", activator.DefaultOptions), kube: true, leader: true},
	{name: "ebb-scaler", parse: adapt(scaler.ParseOptions), usage: usage("ebb-scaler", scaler.DefaultOptions), kube: true},
	{name: "ebb-webhook", parse: adapt(webhook.ParseOptions), usage: usage("ebb-webhook", webhook.DefaultOptions), kube: true, leader: true},
	{name: "ebb-federation", parse: adapt(federation.ParseOptions), usage: usage("ebb-federation", federation.DefaultOptions), kube: true, leader: true},
	{name: "ebb-check", parse: withArgs(adapt(check.ParseOptions), "--app-namespace=ns", "--app-selector=app=x", "--app-url=http://app.ns.svc/",
		"--scaler-address=scaler.ebb-system:9090", "--activator-url=http://activator.ebb-system:8081/readyz"), usage: usage("ebb-check", check.DefaultOptions), kube: true},
}

// TestOneVocabulary: every binary takes the same log, kubeconfig and
// leader-election flags with the same values, refuses a bad one naming it,
// and answers -h with flag.ErrHelp (Main exits 0).
func TestOneVocabulary(t *testing.T) {
	env := map[string]string{"POD_NAME": "p", "POD_NAMESPACE": "ns"}
	getenv := func(k string) string { return env[k] }
	for _, b := range binaries {
		t.Run(b.name, func(t *testing.T) {
			if err := b.parse([]string{"-h"}, getenv); !errors.Is(err, flag.ErrHelp) {
				t.Errorf("-h: %v, want flag.ErrHelp", err)
			}
			for _, level := range []string{"debug", "info", "warn", "error"} {
				for _, format := range []string{"json", "text"} {
					if err := b.parse([]string{"--log-level=" + level, "--log-format=" + format}, getenv); err != nil {
						t.Errorf("--log-level=%s --log-format=%s: %v", level, format, err)
					}
				}
			}
			err := b.parse(nil, func(k string) string {
				return map[string]string{"POD_NAME": "p", "POD_NAMESPACE": "ns", "EBB_LOG_LEVEL": "1", "EBB_LOG_FORMAT": "console"}[k]
			})
			for _, want := range []string{`--log-level "1"`, `--log-format "console"`} {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("EBB_LOG_LEVEL=1 EBB_LOG_FORMAT=console: %v, want an error naming %s", err, want)
				}
			}
			var usage strings.Builder
			b.usage(&usage)
			for flag, has := range map[string]bool{"--log-level": true, "--log-format": true, "--kubeconfig": b.kube, "(env KUBECONFIG": b.kube, "--leader-elect": b.leader} {
				if got := strings.Contains(usage.String(), flag); got != has {
					t.Errorf("usage has %s: %v, want %v:\n%s", flag, got, has, usage.String())
				}
			}
			if b.leader {
				if err := b.parse([]string{"--leader-elect=false"}, getenv); err != nil {
					t.Errorf("--leader-elect=false: %v", err)
				}
			}
		})
	}
}

// The sidecar runs in users' pods, where service links set <SERVICE>_PORT,
// <SERVICE>_SERVICE_HOST, <SERVICE>_PORT_<n>_<PROTO>_... for every Service
// of the namespace: a Service named ebb-admin must not be able to set a
// sidecar option.
func TestSidecarVariablesMissServiceLinks(t *testing.T) {
	var usage strings.Builder
	options.WriteUsage(&usage, "ebb-sidecar", sidecar.DefaultOptions())
	n := 0
	for _, l := range strings.Split(usage.String(), "\n") {
		_, env, ok := strings.Cut(l, "(env ")
		if !ok {
			continue
		}
		env, _, _ = strings.Cut(strings.TrimSuffix(env, ")"), ",")
		n++
		for _, suffix := range []string{"_PORT", "_HOST", "_PROTO", "_ADDR"} {
			if strings.HasSuffix(env, suffix) {
				t.Errorf("sidecar variable %s ends in %s, as service links' do", env, suffix)
			}
		}
	}
	if n < 10 {
		t.Fatalf("found %d variables in the sidecar's usage:\n%s", n, usage.String())
	}
}
