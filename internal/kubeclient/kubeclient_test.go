package kubeclient

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
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

// TestLimit: every client built from the config shares one budget.
func TestLimit(t *testing.T) {
	var cfg rest.Config
	Limit(&cfg, DefaultQPS, DefaultBurst)
	if cfg.QPS != DefaultQPS || cfg.Burst != DefaultBurst || cfg.RateLimiter == nil || cfg.RateLimiter.QPS() != DefaultQPS {
		t.Errorf("Limit(50, 100): QPS %v, Burst %d, RateLimiter %v; want 50, 100 and one limiter of 50/s", cfg.QPS, cfg.Burst, cfg.RateLimiter)
	}
	a, err := kubernetes.NewForConfig(&rest.Config{Host: "https://198.19.0.1:6443", QPS: cfg.QPS, Burst: cfg.Burst, RateLimiter: cfg.RateLimiter})
	if err != nil {
		t.Fatal(err)
	}
	if got := a.CoreV1().RESTClient().GetRateLimiter(); got != cfg.RateLimiter {
		t.Errorf("a client's limiter is %p, want the shared %p", got, cfg.RateLimiter)
	}
	var untouched rest.Config
	if Limit(&untouched, 0, 0); untouched.QPS != 0 || untouched.RateLimiter != nil {
		t.Errorf("Limit(0, 0) changed the config: %+v", untouched)
	}
}

// TestSeparate: a Separate config's clients do not wait behind a drained
// shared bucket (a Lease renewal behind a burst of status writes), and
// keep the flags' figures.
func TestSeparate(t *testing.T) {
	cfg := &rest.Config{Host: "https://198.19.0.1:6443"}
	Limit(cfg, 5, 3)
	own := Separate(cfg)
	if own.RateLimiter == nil || own.RateLimiter == cfg.RateLimiter || own.QPS != 5 || own.Burst != 3 || own.RateLimiter.QPS() != 5 {
		t.Fatalf("Separate: QPS %v, Burst %d, limiter %p (shared %p); want 5, 3 and a limiter of its own", own.QPS, own.Burst, own.RateLimiter, cfg.RateLimiter)
	}
	for cfg.RateLimiter.TryAccept() { // a burst of bulk writes
	}
	lease, err := kubernetes.NewForConfig(own)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if !lease.CoordinationV1().RESTClient().GetRateLimiter().TryAccept() {
			t.Fatalf("request %d of the separate client waits behind the drained shared bucket", i+1)
		}
	}
	if Separate(&rest.Config{}).RateLimiter != nil {
		t.Error("Separate of a config without limits made a limiter; want client-go's defaults")
	}
}
