package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"testing"

	"github.com/ebb-dev/ebb/test/repo"
)

// TestREADMEMetrics: the README's metrics table lists every ebb_ metric the
// components export, and no other.
func TestREADMEMetrics(t *testing.T) {
	root := repo.MustRoot(t)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(ebb_[a-z_]+)` \\|").FindAllStringSubmatch(string(readme), -1) {
		documented[m[1]] = true
	}
	exported := ExportedMetrics(t)
	if len(exported) == 0 || len(documented) == 0 {
		t.Fatalf("found %d exported and %d documented metrics", len(exported), len(documented))
	}
	if missing := diff(exported, documented); len(missing) > 0 {
		t.Errorf("exported but not in the README's metrics table: %q", missing)
	}
	if stale := diff(documented, exported); len(stale) > 0 {
		t.Errorf("in the README's metrics table but exported by no component: %q", stale)
	}
}

func diff(a, b map[string]bool) []string {
	var out []string
	for k := range a {
		if !b[k] {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}
