package scaler

import (
	"errors"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestParseOptions(t *testing.T) {
	def := DefaultOptions()
	for name, tc := range map[string]struct {
		args []string
		env  map[string]string
		want func(*Options)
	}{
		"defaults":   {nil, nil, func(*Options) {}},
		"short tick": {[]string{"--tick=30ms"}, nil, func(o *Options) { o.Tick, o.ReadTimeout = 30*time.Millisecond, 10*time.Millisecond }},
		"flags": {[]string{"--api-group-suffix=team1.example.com", "--tick=500ms", "--read-timeout=100ms", "--grpc-addr=127.0.0.1:0"}, nil, func(o *Options) {
			o.GroupSuffix, o.Tick, o.ReadTimeout, o.GRPCAddr = "team1.example.com", 500*time.Millisecond, 100*time.Millisecond, "127.0.0.1:0"
		}},
		"env fallback":    {nil, map[string]string{"EBB_API_GROUP_SUFFIX": "team1.example.com", "EBB_READ_PARALLELISM": "16"}, func(o *Options) { o.GroupSuffix, o.ReadParallelism = "team1.example.com", 16 }},
		"flag over env":   {[]string{"--stale-ticks=5"}, map[string]string{"EBB_STALE_TICKS": "9"}, func(o *Options) { o.StaleTicks = 5 }},
		"text logs":       {[]string{"--log-format=text", "--log-level=debug"}, nil, func(o *Options) { o.Log.Format, o.Log.Level = "text", "debug" }},
		"kubeconfig":      {nil, map[string]string{"KUBECONFIG": "options_test.go"}, func(o *Options) { o.Kubeconfig = "options_test.go" }},
		"api budget":      {[]string{"--kube-api-qps=20", "--kube-api-burst=30"}, nil, func(o *Options) { o.KubeAPIQPS, o.KubeAPIBurst = 20, 30 }},
		"kubeconfig list": {nil, map[string]string{"KUBECONFIG": "options_test.go:absent"}, func(o *Options) { o.Kubeconfig = "options_test.go:absent" }},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := ParseOptions(tc.args, func(k string) string { return tc.env[k] })
			if err != nil {
				t.Fatal(err)
			}
			want := def
			want.ReadTimeout = DefaultReadTimeout
			tc.want(&want)
			if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(Options{}, "Client", "RestConfig", "Logger")); diff != "" {
				t.Errorf("options (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseOptionsReportsEveryProblem(t *testing.T) {
	_, err := ParseOptions([]string{"--api-group-suffix=ebb", "--tick=5ms", "--tls-key-file=k.pem", "--log-format=xml", "--kube-api-qps=0", "--kube-api-burst=0"},
		func(k string) string { return map[string]string{"EBB_READ_PARALLELISM": "many"}[k] })
	if err == nil {
		t.Fatal("accepted bad options")
	}
	for _, want := range []string{
		`EBB_READ_PARALLELISM="many"`,
		`--api-group-suffix: api group suffix "ebb": must contain a dot`,
		"--tick 5ms: want 10ms to 1m0s",
		"--tls-cert-file and --tls-key-file: set both or neither",
		"--tls-key-file: stat k.pem",
		`--log-format "xml": want json or text`,
		"--kube-api-qps 0: must be above 0",
		"--kube-api-burst 0: must be at least 1",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

func TestParseOptionsHelpAndStrays(t *testing.T) {
	if _, err := ParseOptions([]string{"-h"}, func(string) string { return "" }); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v, want flag.ErrHelp", err)
	}
	if _, err := ParseOptions([]string{"serve"}, func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), `unexpected arguments ["serve"]`) {
		t.Errorf("stray argument: %v", err)
	}
}
