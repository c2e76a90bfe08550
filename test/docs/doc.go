// Package docs keeps what is written about ebb (the README, docs/, the
// chart's dashboard) true to the code: ExportedMetrics reads the metric
// names the components export from their source, and its tests hold
// docs/operations.md's metrics table to them, docs/configuration.md's chart
// values to charts/ebb/values.yaml and its flag lists to each binary's -h,
// and every relative link of the README, DEVELOPING.md and docs/ to a file
// and heading that exist.
package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/test/repo"
)

// ExportedMetrics are the ebb_* metric names in the components' Go source.
func ExportedMetrics(t testing.TB) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	re := regexp.MustCompile(`"(ebb_[a-z_]+)"`)
	for _, dir := range []string{"activator", "scaler", "sidecar", "webhook", "federation", "internal"} {
		err := filepath.WalkDir(filepath.Join(repo.MustRoot(t), dir), func(p string, e os.DirEntry, err error) error {
			if err != nil || e.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			b, err := os.ReadFile(p)
			for _, m := range re.FindAllStringSubmatch(string(b), -1) {
				out[m[1]] = true
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	delete(out, groupsuffix.MetricLabel) // a label, not a metric
	if len(out) == 0 {
		t.Fatal("found no ebb_ metric in the components' source")
	}
	return out
}
