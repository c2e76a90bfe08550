package kubeclient

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestConfig(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(path, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://198.19.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Config(path)
	if err != nil || cfg.Host != "https://198.19.0.1:6443" {
		t.Fatalf("Config(%s): %v, %v", path, cfg, err)
	}
	if cfg, err := Config(path + string(filepath.ListSeparator) + filepath.Join(dir, "absent")); err != nil || cfg.Host != "https://198.19.0.1:6443" {
		t.Errorf("a KUBECONFIG list: %v, %v", cfg, err)
	}
	if _, err := Config(filepath.Join(dir, "absent")); err == nil || !strings.Contains(err.Error(), "absent") {
		t.Errorf("a missing kubeconfig: %v, want an error naming it", err)
	}
}
