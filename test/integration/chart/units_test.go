package chart

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/ebb-dev/ebb/activator"
	"github.com/ebb-dev/ebb/webhook/inject"
)

// renamedValues are the values renamed before the first release, each with
// the refusal a release that still sets it gets.
var renamedValues = []struct {
	sets []string // the old name set, and what it needs
	yaml string   // the same in a values file
	want string
}{
	{[]string{"activator.drainTimeoutSeconds=30"}, "activator:\n  drainTimeoutSeconds: 30\n",
		"activator.drainTimeoutSeconds was renamed activator.drainTimeout (a Go duration, e.g. 30s)"},
	{[]string{"activator.pools[0].name=gold", "activator.pools[0].drainTimeoutSeconds=5"}, "activator:\n  pools:\n    - name: gold\n      drainTimeoutSeconds: 5\n",
		"activator.pools[gold].drainTimeoutSeconds was renamed activator.pools[gold].drainTimeout (a Go duration, e.g. 30s)"},
	{[]string{"webhook.timeoutSeconds=5"}, "webhook:\n  timeoutSeconds: 5\n",
		"webhook.timeoutSeconds was renamed webhook.timeout (a Go duration of whole seconds, e.g. 5s)"},
	{[]string{"federation.healthPort=8081"}, "federation:\n  healthPort: 8081\n",
		"federation.healthPort was renamed federation.adminPort (a port number, e.g. 8081)"},
}

// TestRenamedValuesAreRefused: a release that sets a value by its old name,
// with --set or in a values file kept from before, is refused with the new
// name, by `helm template` and by `helm upgrade --install`; several old
// names are refused at once.
func TestRenamedValuesAreRefused(t *testing.T) {
	dir := t.TempDir()
	for i, tc := range renamedValues {
		args := []string{"template", "ebb", chartDir(t), "--namespace", "ebb-system"}
		for _, s := range tc.sets {
			args = append(args, "--set", s)
		}
		if _, stderr, err := helm(t, args...); err == nil || !strings.Contains(stderr, tc.want) {
			t.Errorf("--set %v: %v; the refusal does not say %q:\n%s", tc.sets, err, tc.want, stderr)
		}
		file := filepath.Join(dir, "old"+itoa(i)+".yaml")
		if err := os.WriteFile(file, []byte(tc.yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, stderr, err := helm(t, "template", "ebb", chartDir(t), "--namespace", "ebb-system", "-f", file); err == nil || !strings.Contains(stderr, tc.want) {
			t.Errorf("-f with %q: %v; the refusal does not say %q:\n%s", tc.yaml, err, tc.want, stderr)
		}
	}

	_, stderr, err := helm(t, "template", "ebb", chartDir(t), "--namespace", "ebb-system",
		"--set", renamedValues[0].sets[0], "--set", renamedValues[2].sets[0])
	if err == nil || !strings.Contains(stderr, renamedValues[0].want) || !strings.Contains(stderr, renamedValues[2].want) {
		t.Errorf("two old names: %v; the refusal does not name both:\n%s", err, stderr)
	}

	// helm upgrade renders with the cluster at hand; the refusal is the same.
	ns := "renamed-ebb"
	if err := lc.EnsureNamespace(context.Background(), ns, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = lc.Client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	})
	_, stderr, err = helm(t, "upgrade", "--install", "ebb", chartDir(t), "--namespace", ns, "--dry-run=server", "--kubeconfig", lc.Kubeconfig,
		"--set", renamedValues[0].sets[0])
	if err == nil || !strings.Contains(stderr, renamedValues[0].want) {
		t.Errorf("helm upgrade with %s: %v; the refusal does not say %q:\n%s", renamedValues[0].sets[0], err, renamedValues[0].want, stderr)
	}
}

// TestActivatorGracePeriod: an activator pod's termination grace period is
// its cold-start timeout plus its drain timeout plus 10s, in whole seconds
// rounded up, per pool; the drain timeout reaches the binary as written.
func TestActivatorGracePeriod(t *testing.T) {
	objs := render(t, release{name: "ebb", namespace: "ebb-system", sets: []string{
		"activator.pools[0].name=gold", "activator.pools[0].coldStartTimeout=30s", "activator.pools[0].drainTimeout=1500ms",
		"activator.pools[1].name=long", "activator.pools[1].coldStartTimeout=15m", "activator.pools[1].drainTimeout=1h",
	}})
	for _, tc := range []struct {
		deployment string
		grace      int
		drain      string
	}{
		{"ebb-activator", 2*60 + 30 + 10, "--drain-timeout=30s"},
		{"ebb-activator-gold", 30 + 2 + 10, "--drain-timeout=1500ms"},
		{"ebb-activator-long", 15*60 + 3600 + 10, "--drain-timeout=1h"},
	} {
		d := find(t, objs, "Deployment", tc.deployment)
		grace, _, _ := unstructured.NestedFieldNoCopy(d.Object, "spec", "template", "spec", "terminationGracePeriodSeconds")
		if number(grace) != tc.grace {
			t.Errorf("%s: terminationGracePeriodSeconds %v, want %d", tc.deployment, grace, tc.grace)
		}
		if args := containerArgs(t, d); !contains(args, tc.drain) {
			t.Errorf("%s: args lack %s: %q", tc.deployment, tc.drain, args)
		}
	}
}

// TestWebhookTimeout: webhook.timeout, a duration, is the webhook
// configuration's timeoutSeconds.
func TestWebhookTimeout(t *testing.T) {
	for set, want := range map[string]int{"": 5, "webhook.timeout=2s": 2, "webhook.timeout=1s": 1} {
		r := release{name: "ebb", namespace: "ebb-system"}
		if set != "" {
			r.sets = []string{set}
		}
		mwc := find(t, render(t, r), "MutatingWebhookConfiguration", "sidecar-injector.ebb.dev")
		hooks, _, _ := unstructured.NestedSlice(mwc.Object, "webhooks")
		if got := hooks[0].(map[string]any)["timeoutSeconds"]; number(got) != want {
			t.Errorf("with %q: timeoutSeconds %v, want %d", set, got, want)
		}
	}
}

// prometheusDuration is Prometheus' own pattern of a duration
// (model.ParseDuration), which the Prometheus Operator's CRDs hold
// ServiceMonitor and PodMonitor intervals to.
const prometheusDuration = `^((([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?|0)$`

// TestMonitorIntervals: the monitors' intervals are Prometheus durations
// above 0: the schema holds them to Prometheus' pattern, refuses Go-only
// forms (1.5m, units out of order) and zero, and the monitors carry the
// value as given.
func TestMonitorIntervals(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(chartDir(t), "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties map[string]struct {
			Properties map[string]struct {
				AllOf []struct{ Pattern string } `json:"allOf"`
			} `json:"properties"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(raw, &schema); err != nil {
		t.Fatal(err)
	}
	for _, monitor := range []string{"serviceMonitor", "podMonitor"} {
		allOf := schema.Properties[monitor].Properties["interval"].AllOf
		if len(allOf) == 0 || allOf[0].Pattern != prometheusDuration {
			t.Errorf("%s.interval: the schema's pattern is not Prometheus' %s: %+v", monitor, prometheusDuration, allOf)
		}
		for _, bad := range []string{"1.5m", "30s1m", "1h30", "0", "0s", "00m", "", "-30s", "30 s"} {
			_, stderr, err := helm(t, "template", "ebb", chartDir(t), "--namespace", "ebb-system", "--set", monitor+".enabled=true", "--set-string", monitor+".interval="+bad)
			if err == nil {
				t.Errorf("%s.interval=%q was accepted", monitor, bad)
			} else if !strings.Contains(stderr, monitor+"/interval") {
				t.Errorf("%s.interval=%q: the refusal does not name it:\n%s", monitor, bad, stderr)
			}
		}
		for _, good := range []string{"30s", "1m30s", "1d", "2w", "500ms", "1m30ms", "1h0m0s"} {
			objs := render(t, release{name: "ebb", namespace: "ebb-system", sets: []string{monitor + ".enabled=true", monitor + ".interval=" + good}})
			kind, name, field := "ServiceMonitor", "ebb-scaler", "endpoints"
			if monitor == "podMonitor" {
				kind, name, field = "PodMonitor", "ebb-sidecars", "podMetricsEndpoints"
			}
			eps, _, _ := unstructured.NestedSlice(find(t, objs, kind, name).Object, "spec", field)
			if got := eps[0].(map[string]any)["interval"]; got != good {
				t.Errorf("%s.interval=%s: the %s says %v", monitor, good, kind, got)
			}
		}
	}
}

// TestOneColdStartCeiling: the per-app annotation, the activator's flag and
// the chart (default pool and every other) share one ceiling, 15m.
func TestOneColdStartCeiling(t *testing.T) {
	if inject.MaxColdStartTimeout != activator.MaxColdStartTimeout {
		t.Fatalf("the annotation's ceiling is %v, the activator's %v", inject.MaxColdStartTimeout, activator.MaxColdStartTimeout)
	}
	ceiling := activator.MaxColdStartTimeout.String() // 15m0s
	for _, prefix := range []string{"activator.", "activator.pools[0]."} {
		var with []string
		key := "activator.coldStartTimeout"
		if prefix != "activator." {
			with = []string{"activator.pools[0].name=gold"}
			key = "activator.pools[gold].coldStartTimeout"
		}
		render(t, release{name: "ebb", namespace: "ebb-system", sets: append([]string{prefix + "coldStartTimeout=" + ceiling}, with...)})
		args := []string{"template", "ebb", chartDir(t), "--namespace", "ebb-system", "--set", prefix + "coldStartTimeout=" + ceiling + "1ms"}
		for _, w := range with {
			args = append(args, "--set", w)
		}
		_, stderr, err := helm(t, args...)
		if err == nil || !strings.Contains(stderr, key) || !strings.Contains(stderr, "to 15m") {
			t.Errorf("%scoldStartTimeout=%s1ms: %v; the refusal does not name %s and its ceiling:\n%s", prefix, ceiling, err, key, stderr)
		}
	}
}
