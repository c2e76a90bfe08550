package chart

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestPackageAsReleased runs what the release workflow runs on tag v1.2.3
// (`helm package --version 1.2.3 --app-version 1.2.3`) and renders the
// package: every image is the release's, tagged 1.2.3, which is what
// `make images IMAGE_TAG=1.2.3` pushes.
func TestPackageAsReleased(t *testing.T) {
	dir := t.TempDir()
	if _, _, err := helm(t, "package", chartDir(t), "--version", "1.2.3", "--app-version", "1.2.3", "--destination", dir); err != nil {
		t.Fatal(err)
	}
	pkg := filepath.Join(dir, "ebb-1.2.3.tgz")
	out, _, err := helm(t, "template", "ebb", pkg, "--namespace", "ebb-system")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decode(out)
	if err != nil {
		t.Fatal(err)
	}
	// The Deployments' images, and the sidecar's, which the webhook is
	// told by a flag.
	var images []string
	for _, d := range append(ofKind(objs, "Deployment"), ofKind(objs, "Pod")...) { // Pod: helm test's
		for _, c := range containers(t, d) {
			images = append(images, c["image"].(string))
			for _, a := range c["args"].([]any) {
				if v, ok := strings.CutPrefix(a.(string), "--sidecar-image="); ok {
					images = append(images, v)
				}
			}
		}
	}
	slices.Sort(images)
	want := []string{
		"ghcr.io/ebb-dev/ebb-activator:1.2.3",
		"ghcr.io/ebb-dev/ebb-check:1.2.3",
		"ghcr.io/ebb-dev/ebb-scaler:1.2.3",
		"ghcr.io/ebb-dev/ebb-sidecar:1.2.3",
		"ghcr.io/ebb-dev/ebb-test-app:1.2.3",
		"ghcr.io/ebb-dev/ebb-webhook:1.2.3",
	}
	if !slices.Equal(images, want) {
		t.Errorf("images of the packaged chart: %v, want %v", images, want)
	}
}
