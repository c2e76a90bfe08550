package webhook

import (
	"flag"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDefaultOptionsAreValid(t *testing.T) {
	o := DefaultOptions()
	if err := o.Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	t.Setenv("EBB_SIDECAR_LISTEN_PORT", "eighty")
	o := DefaultOptions()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	o.BindFlags(fs)
	if err := fs.Parse([]string{"--api-group-suffix=ebb", "--tls-mode=self-signed", "--sidecar-image-pull-policy=Sometimes",
		"--sidecar-memory-limit=lots", "--log-format=xml", "--sidecar-admin-port=0"}); err != nil {
		t.Fatal(err)
	}
	err := o.Validate()
	if err == nil {
		t.Fatal("Validate accepted bad options")
	}
	var got []string
	for _, line := range strings.Split(err.Error(), "\n") {
		got = append(got, strings.SplitN(line, " ", 2)[0])
	}
	want := []string{`EBB_SIDECAR_LISTEN_PORT="eighty":`, "--api-group-suffix:", "--namespace", "--sidecar-image-pull-policy", "--sidecar-memory-limit", "--sidecar-admin-port", "--log-format"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("problems (-want +got):\n%s\nfull error:\n%v", diff, err)
	}
}

func TestFlagsFallBackToEnvironment(t *testing.T) {
	t.Setenv("EBB_API_GROUP_SUFFIX", "team1.example.com")
	t.Setenv("POD_NAMESPACE", "ebb-team1")
	t.Setenv("EBB_SIDECAR_DRAIN_TIMEOUT", "7s")
	t.Setenv("EBB_EXTRA_SANS", "127.0.0.1, webhook.local")
	o := DefaultOptions()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	o.BindFlags(fs)
	if err := fs.Parse([]string{"--sidecar-image=img:1"}); err != nil {
		t.Fatal(err)
	}
	got := []string{o.APIGroupSuffix, o.Namespace, o.SidecarDrainTimeout.String(), strings.Join(o.ExtraSANs, "|"), o.SidecarImage}
	want := []string{"team1.example.com", "ebb-team1", "7s", "127.0.0.1|webhook.local", "img:1"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("options (-want +got):\n%s", diff)
	}
}
