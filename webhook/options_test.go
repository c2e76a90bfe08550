package webhook

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/webhook/inject"
)

func TestDefaultOptionsAreValid(t *testing.T) {
	o := DefaultOptions()
	if err := o.Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	env := map[string]string{"EBB_SIDECAR_LISTEN_PORT": "eighty", "EBB_LEADER_ELECT": "maybe"}
	_, err := ParseOptions([]string{"--api-group-suffix=ebb", "--tls-mode=self-signed", "--sidecar-image-pull-policy=Sometimes",
		"--sidecar-memory-limit=lots", "--log-format=xml", "--sidecar-admin-port=0"}, func(k string) string { return env[k] })
	if err == nil {
		t.Fatal("Validate accepted bad options")
	}
	var got []string
	for _, line := range strings.Split(err.Error(), "\n") {
		got = append(got, strings.SplitN(line, " ", 2)[0])
	}
	want := []string{`EBB_LEADER_ELECT="maybe"`, `EBB_SIDECAR_LISTEN_PORT="eighty"`, "--api-group-suffix:", "--namespace", "--sidecar-image-pull-policy", "--sidecar-memory-limit", "--sidecar-admin-port", "--log-format"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("problems (-want +got):\n%s\nfull error:\n%v", diff, err)
	}
}

func TestFlagsFallBackToEnvironment(t *testing.T) {
	env := map[string]string{
		"EBB_API_GROUP_SUFFIX":      "team1.example.com",
		"POD_NAMESPACE":             "ebb-team1",
		"EBB_SIDECAR_DRAIN_TIMEOUT": "7s",
		"EBB_EXTRA_SANS":            "127.0.0.1, webhook.local",
		"EBB_SIDECAR_IMAGE":         "img:0",
	}
	o, err := ParseOptions([]string{"--sidecar-image=img:1"}, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	got := []string{o.GroupSuffix, o.Namespace, o.SidecarDrainTimeout.String(), strings.Join(o.ExtraSANs, "|"), o.SidecarImage}
	want := []string{"team1.example.com", "ebb-team1", "7s", "127.0.0.1|webhook.local", "img:1"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("options (-want +got):\n%s", diff)
	}
}

// The injected sidecar's defaults are the injector's: one source.
func TestSidecarDefaultsAreTheInjectors(t *testing.T) {
	names := groupsuffix.MustNew(groupsuffix.Default)
	o := DefaultOptions()
	quantities := cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })
	ignoreNames := cmpopts.IgnoreFields(inject.Config{}, "Names") // the value passed in
	if diff := cmp.Diff(inject.DefaultConfig(names, Version), o.sidecarConfig(names), quantities, ignoreNames); diff != "" {
		t.Errorf("sidecar config from default options (-injector's default +webhook's):\n%s", diff)
	}
}
