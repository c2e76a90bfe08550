// Package repo finds ebb's checkout and the programs `make tools` builds
// into it, for tests and the programs under test/. It imports nothing
// beyond the standard library, so a build program using it stays small.
package repo

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// Root walks up from the working directory to the directory holding ebb's
// go.mod.
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find module root: %w", err)
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(b, []byte("module github.com/ebb-dev/ebb\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("find module root: no go.mod of github.com/ebb-dev/ebb above the working directory")
		}
		dir = parent
	}
}

// Bin is <root>/bin, where the Makefile puts every program the tests run.
// EBB_BIN_DIR overrides it.
func Bin() (string, error) {
	if d := os.Getenv("EBB_BIN_DIR"); d != "" {
		return filepath.Abs(d)
	}
	root, err := Root()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "bin"), nil
}

// MustRoot is Root for tests: it fails t when there is none.
func MustRoot(t testing.TB) string {
	t.Helper()
	root, err := Root()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// Tool is the path of bin/<name>, built by `make tools`. When it is missing,
// a test under -short (the unit tests, which need no tools) is skipped and
// any other fails, so that `make test` never passes by skipping.
func Tool(t testing.TB, name string) string {
	t.Helper()
	dir, err := Bin()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if _, err := os.Stat(p); err != nil {
		if testing.Short() {
			t.Skipf("needs %s (make tools; make test-integration runs this test)", p)
		}
		t.Fatalf("needs %s: build it with `make tools`", p)
	}
	return p
}
