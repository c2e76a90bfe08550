package e2e

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestHelmTest: `helm test` on the installed release passes (ebb-check: the
// API server reaches the webhook, a request passes the sidecar, the scaler
// answers gRPC health, the activator its readiness) and leaves nothing
// behind.
func TestHelmTest(t *testing.T) {
	ctx := t.Context()
	out, err := ebb.Test(ctx, lc)
	if err != nil {
		t.Fatalf("helm test: %v\n%s", err, out)
	}
	for _, want := range []string{"webhook", "sidecar", "scaler", "activator", "Succeeded"} {
		if !strings.Contains(out, want) {
			t.Errorf("helm test's output lacks %q:\n%s", want, out)
		}
	}
	t.Logf("helm test:\n%s", out)
	ns := ebb.Fullname + "-check-" + strings.ReplaceAll(ebb.Names.Suffix(), ".", "-")
	if n, err := lc.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err == nil && n.DeletionTimestamp == nil {
		t.Errorf("namespace %s left behind after the test passed", ns)
	}
}
