package cluster

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/ebb-dev/ebb/test/repo"
)

// binaries checks that every named program exists in binDir and returns
// their paths, or one error naming everything missing and how to build it.
func binaries(binDir string, names ...string) (map[string]string, error) {
	paths := make(map[string]string, len(names))
	var missing []string
	for _, n := range names {
		p := filepath.Join(binDir, n)
		if _, err := os.Stat(p); err != nil {
			missing = append(missing, n)
			continue
		}
		paths[n] = p
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("missing %v in %s: run `make tools build` first", missing, binDir)
	}
	return paths, nil
}

// lookPath finds a system program (etcd, nft, ip) or says which Debian
// package provides it.
func lookPath(name, pkg string) (string, error) {
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s not found: install Debian's %s (make tools does)", name, pkg)
	}
	return p, nil
}

// ModuleDir is where the module cache holds module@version, or module at
// the version of ebb's build list (KEDA's for its CRDs; cert-manager's,
// which `make tools` downloads, for theirs).
func ModuleDir(module string) (string, error) {
	root, err := repo.Root()
	if err != nil {
		return "", err
	}
	cmd := exec.Command("go", "mod", "download", "-json", module)
	cmd.Dir = root
	out, err := cmd.Output()
	var m struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &m); err != nil || jerr != nil || m.Dir == "" {
		return "", fmt.Errorf("go mod download %s (needs the module cache or the Go module proxy; make tools): %v %s", module, err, m.Error)
	}
	return m.Dir, nil
}
