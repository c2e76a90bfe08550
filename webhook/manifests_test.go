package webhook_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/yaml"

	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/test/repo"
	"github.com/ebb-dev/ebb/webhook"
)

func controllerGen(t *testing.T) (root, bin string) {
	t.Helper()
	return repo.MustRoot(t), repo.Tool(t, "controller-gen")
}

// TestGeneratedFilesAreFresh regenerates config/ and the deepcopy code into
// a temporary directory and fails when the checked-in files differ.
func TestGeneratedFilesAreFresh(t *testing.T) {
	root, bin := controllerGen(t)
	tmp := t.TempDir()
	args := []string{"object", "crd:crdVersions=v1", "rbac:roleName=ebb-webhook", "webhook",
		"paths=./internal/apis/...", "paths=./webhook/...",
		"output:object:stdout",
		"output:crd:artifacts:config=" + filepath.Join(tmp, "crd"),
		"output:rbac:artifacts:config=" + filepath.Join(tmp, "rbac"),
		"output:webhook:artifacts:config=" + filepath.Join(tmp, "webhook"),
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = root
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("controller-gen: %v\n%s", err, stderr.String())
	}
	const regen = "regenerate with: bin/controller-gen object crd:crdVersions=v1 rbac:roleName=ebb-webhook webhook paths=./internal/apis/... paths=./webhook/... output:crd:artifacts:config=config/crd output:rbac:artifacts:config=config/rbac output:webhook:artifacts:config=config/webhook"
	deepcopy, err := os.ReadFile(filepath.Join(root, "internal/apis/routing/v1alpha1/zz_generated.deepcopy.go"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(stdout.String(), string(deepcopy)); diff != "" {
		t.Errorf("zz_generated.deepcopy.go is stale (-generated +checked in):\n%s\n%s", diff, regen)
	}
	for _, dir := range []string{"crd", "rbac", "webhook"} {
		want := readDir(t, filepath.Join(tmp, dir))
		got := readDir(t, filepath.Join(root, "config", dir))
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("config/%s is stale (-generated +checked in):\n%s\n%s", dir, diff, regen)
		}
	}
}

func readDir(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files[e.Name()] = string(b)
	}
	return files
}

// TestConfigurationMatchesGeneratedManifest keeps webhook.Configuration and
// webhook.ValidatingConfiguration (any suffix, with selectors) and the
// controller-gen markers in step.
func TestConfigurationMatchesGeneratedManifest(t *testing.T) {
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "config", "webhook", "manifests.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var generated admissionregistrationv1.MutatingWebhookConfiguration
	var generatedValidating admissionregistrationv1.ValidatingWebhookConfiguration
	for _, doc := range bytes.Split(b, []byte("\n---\n")) {
		var kind struct{ Kind string }
		if err := yaml.Unmarshal(doc, &kind); err != nil {
			t.Fatal(err)
		}
		var into any
		switch kind.Kind {
		case "MutatingWebhookConfiguration":
			into = &generated
		case "ValidatingWebhookConfiguration":
			into = &generatedValidating
		default:
			continue
		}
		if err := yaml.Unmarshal(doc, into); err != nil {
			t.Fatal(err)
		}
	}
	if len(generated.Webhooks) != 1 || len(generatedValidating.Webhooks) != 1 {
		t.Fatalf("manifests.yaml: %d mutating and %d validating webhooks, want one of each", len(generated.Webhooks), len(generatedValidating.Webhooks))
	}
	names := groupsuffix.MustNew(groupsuffix.Default)
	built := webhook.Configuration(names, webhook.ConfigurationOptions{ClientConfig: *generated.Webhooks[0].ClientConfig.DeepCopy()})
	want := generated.Webhooks[0]
	got := built.Webhooks[0]
	got.NamespaceSelector, got.ObjectSelector = nil, nil // controller-gen cannot express them
	got.Rules[0].Scope = nil
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Configuration differs from config/webhook/manifests.yaml (-generated +built):\n%s", diff)
	}
	validating := webhook.ValidatingConfiguration(names, webhook.ConfigurationOptions{ClientConfig: *generatedValidating.Webhooks[0].ClientConfig.DeepCopy()})
	gotV := validating.Webhooks[0]
	gotV.Rules[0].Scope = nil
	gotV.MatchConditions = nil // controller-gen cannot express them
	if diff := cmp.Diff(generatedValidating.Webhooks[0], gotV); diff != "" {
		t.Errorf("ValidatingConfiguration differs from config/webhook/manifests.yaml (-generated +built):\n%s", diff)
	}
}
