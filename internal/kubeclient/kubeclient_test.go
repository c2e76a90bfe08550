package kubeclient

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/ebb-dev/ebb/internal/logging"
)

// client-go's klog lines and controller-runtime's come out as the binary's
// own JSON lines, klog's detail only at debug.
func TestRouteLogs(t *testing.T) {
	for i, level := range []string{logging.LevelInfo, logging.LevelDebug} {
		var b bytes.Buffer
		RouteLogs(logging.New(&b, "prog", logging.Options{Level: level, Format: logging.FormatJSON}), level == logging.LevelDebug)
		klog.InfoS("from klog")
		klog.V(2).InfoS("klog detail")
		ctrllog.Log.Info("from controller-runtime")
		klog.Flush()
		out := b.String()
		for _, want := range []string{`"msg":"from klog"`, `"logger":"prog/client-go"`, `"msg":"from controller-runtime"`} {
			if i > 0 && strings.Contains(want, "controller-runtime") {
				continue // controller-runtime takes the first logger a process sets, only
			}
			if !strings.Contains(out, want) {
				t.Errorf("%s: output lacks %s:\n%s", level, want, out)
			}
		}
		if got, want := strings.Contains(out, "klog detail"), level == logging.LevelDebug; got != want {
			t.Errorf("%s: klog's V(2) line written: %v, want %v:\n%s", level, got, want, out)
		}
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if !strings.HasPrefix(l, "{") {
				t.Errorf("%s: a line that is not JSON: %q", level, l)
			}
		}
	}
}

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
