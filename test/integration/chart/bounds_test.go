package chart

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/ebb-dev/ebb/activator"
	"github.com/ebb-dev/ebb/federation"
	"github.com/ebb-dev/ebb/scaler"
	"github.com/ebb-dev/ebb/webhook"
)

// bound is one value at the edge of what the chart accepts (inside: true)
// or one step past it, with the flag the chart turns it into.
type bound struct {
	value     string // helm --set
	inside    bool
	component string   // webhook, activator or scaler
	flag      string   // the flag the value becomes, with its value: "--tick=5ms"
	with      []string // more --set values the bound needs
}

// chartBounds is every bounded value of values.schema.json and
// templates/_validate.tpl, at each bound and one past it. Ports are bounded
// above only: the binaries take port 0 (any free port, for tests) where the
// chart needs a fixed one.
// selfSigned is the mode in which the webhook checks its certificate.
var selfSigned = []string{"certManager.enabled=false"}

var chartBounds = []bound{
	{"activator.coldStartTimeout=1ms", true, "activator", "--cold-start-timeout=1ms", nil},
	{"activator.coldStartTimeout=999us", false, "activator", "--cold-start-timeout=999us", nil},
	{"activator.coldStartTimeout=15m", true, "activator", "--cold-start-timeout=15m", nil},
	{"activator.coldStartTimeout=15m1ms", false, "activator", "--cold-start-timeout=15m1ms", nil},
	{"activator.coldStartTimeout=1h", false, "activator", "--cold-start-timeout=1h", nil},
	{"activator.drainTimeout=0s", true, "activator", "--drain-timeout=0s", nil},
	{"activator.drainTimeout=1h", true, "activator", "--drain-timeout=1h", nil},
	{"activator.drainTimeout=3600s", true, "activator", "--drain-timeout=3600s", nil},
	{"activator.drainTimeout=1h1ms", false, "activator", "--drain-timeout=1h1ms", nil},
	{"activator.drainTimeout=3601s", false, "activator", "--drain-timeout=3601s", nil},
	{"activator.queueSize=1", true, "activator", "--queue-size=1", nil},
	{"activator.queueSize=0", false, "activator", "--queue-size=0", nil},
	{"activator.queueSize=1000000", true, "activator", "--queue-size=1000000", []string{"activator.maxHeld=1000000"}},
	{"activator.queueSize=1000001", false, "activator", "--queue-size=1000001", nil},
	{"activator.maxHeld=1000", true, "activator", "--max-held=1000", nil}, // = the default queueSize
	{"activator.maxHeld=999", false, "activator", "--max-held=999", nil},
	{"activator.port=65535", true, "activator", "--listen=:65535", nil},
	{"activator.port=65536", false, "activator", "--listen=:65536", nil},
	{"activator.adminPort=65536", false, "activator", "--admin-listen=:65536", nil},
	{"sidecar.adminPort=65535", true, "webhook", "--sidecar-admin-port=65535", nil},
	{"sidecar.adminPort=65536", false, "webhook", "--sidecar-admin-port=65536", nil},
	{"sidecar.drainTimeout=0s", true, "webhook", "--sidecar-drain-timeout=0s", nil},
	{"sidecar.drainTimeout=10m", true, "webhook", "--sidecar-drain-timeout=10m", nil},
	{"sidecar.drainTimeout=10m1s", false, "webhook", "--sidecar-drain-timeout=10m1s", nil},
	{"sidecar.drainTimeout=11m", false, "webhook", "--sidecar-drain-timeout=11m", nil},
	{"webhook.port=65535", true, "webhook", "--webhook-port=65535", nil},
	{"webhook.port=65536", false, "webhook", "--webhook-port=65536", nil},
	{"webhook.adminPort=65535", true, "webhook", "--health-probe-bind-address=:65535", nil},
	{"webhook.metricsPort=65535", true, "webhook", "--metrics-bind-address=:65535", nil},
	{"webhook.certCheckInterval=1m", true, "webhook", "--cert-check-interval=1m", selfSigned},
	{"webhook.certCheckInterval=59s", false, "webhook", "--cert-check-interval=59s", selfSigned},
	{"scaler.tick=10ms", true, "scaler", "--tick=10ms", nil},
	{"scaler.tick=9ms", false, "scaler", "--tick=9ms", nil},
	{"scaler.tick=5ms", false, "scaler", "--tick=5ms", nil},
	{"scaler.tick=1m", true, "scaler", "--tick=1m", nil},
	{"scaler.tick=1m1s", false, "scaler", "--tick=1m1s", nil},
	{"federation.interval=100ms", true, "federation", "--interval=100ms", []string{"federation.enabled=true"}},
	{"federation.interval=99ms", false, "federation", "--interval=99ms", []string{"federation.enabled=true"}},
	{"federation.interval=1m", true, "federation", "--interval=1m", []string{"federation.enabled=true"}},
	{"federation.interval=1m1s", false, "federation", "--interval=1m1s", []string{"federation.enabled=true"}},
	{"federation.adminPort=65535", true, "federation", "--health-probe-bind-address=:65535", []string{"federation.enabled=true"}},
	{"federation.metricsPort=65535", true, "federation", "--metrics-bind-address=:65535", []string{"federation.enabled=true"}},
	{"scaler.port=65535", true, "scaler", "--grpc-addr=:65535", nil},
	{"scaler.port=65536", false, "scaler", "--grpc-addr=:65536", nil},
	{"scaler.adminPort=65536", false, "scaler", "--admin-addr=:65536", nil},
	{"tracing.samplingRatio=0", true, "activator", "--trace-sampling=0", tracingOn},
	{"tracing.samplingRatio=1", true, "activator", "--trace-sampling=1", tracingOn},
	{"tracing.samplingRatio=1.01", false, "activator", "--trace-sampling=1.01", tracingOn},
	{"tracing.samplingRatio=-0.01", false, "activator", "--trace-sampling=-0.01", tracingOn},
	{"tracing.samplingRatio=1", true, "webhook", "--sidecar-trace-sampling=1", tracingOn},
	{"tracing.samplingRatio=1.01", false, "webhook", "--sidecar-trace-sampling=1.01", tracingOn},
	{"tracing.endpoint=https://otel.example:4318", true, "activator", "--otlp-endpoint=https://otel.example:4318", nil},
	{"tracing.endpoint=otel.example:4318", false, "activator", "--otlp-endpoint=otel.example:4318", nil},
}

// tracingOn is a release that traces, so the sampling ratio is rendered.
var tracingOn = []string{"tracing.endpoint=http://otel-collector.monitoring:4318"}

// TestBoundsMatchTheBinaries: every value the chart accepts at a bound is
// accepted by the binary's own option parser from the args the chart
// renders, and every value one past a bound is refused by both, the chart
// naming the value. A schema looser than a binary would install pods that
// crash-loop; one stricter would refuse what works.
func TestBoundsMatchTheBinaries(t *testing.T) {
	def := render(t, defaultRelease)
	for _, b := range chartBounds {
		t.Run(b.value, func(t *testing.T) {
			key, _, _ := strings.Cut(b.value, "=")
			if b.inside {
				objs := render(t, release{name: defaultRelease.name, namespace: defaultRelease.namespace, sets: append([]string{b.value}, b.with...)})
				d := find(t, objs, "Deployment", fullname(defaultRelease)+"-"+b.component)
				args := containerArgs(t, d)
				if !contains(args, b.flag) {
					t.Fatalf("the chart does not pass %s for %s: %q", b.flag, b.value, args)
				}
				if err := parseAs(t, b.component, d, args); err != nil {
					t.Errorf("the chart accepts %s; ebb-%s refuses it: %v", b.value, b.component, err)
				}
				return
			}
			args := []string{"template", defaultRelease.name, chartDir(t), "--namespace", defaultRelease.namespace, "--set", b.value}
			for _, w := range b.with {
				args = append(args, "--set", w)
			}
			_, stderr, err := helm(t, args...)
			if err == nil {
				t.Errorf("the chart accepts %s", b.value)
			} else if last := key[strings.LastIndex(key, ".")+1:]; !strings.Contains(stderr, last) {
				t.Errorf("the chart refuses %s without naming %s:\n%s", b.value, last, stderr)
			}
			base := def
			if len(b.with) > 0 {
				base = render(t, release{name: defaultRelease.name, namespace: defaultRelease.namespace, sets: b.with})
			}
			d := find(t, base, "Deployment", fullname(defaultRelease)+"-"+b.component)
			name, _, _ := strings.Cut(b.flag, "=")
			if err := parseAs(t, b.component, d, append(withoutFlag(containerArgs(t, d), name), b.flag)); err == nil {
				t.Errorf("ebb-%s accepts %s, which the chart refuses", b.component, b.flag)
			}
		})
	}
}

func parseAs(t *testing.T, component string, d *unstructured.Unstructured, args []string) error {
	env := containerEnv(t, d)
	getenv := func(k string) string { return env[k] }
	var err error
	switch component {
	case "activator":
		_, err = activator.ParseOptions(args, getenv)
	case "scaler":
		_, err = scaler.ParseOptions(args, getenv)
	case "webhook":
		_, err = webhook.ParseOptions(args, getenv)
	case "federation":
		_, err = federation.ParseOptions(args, getenv)
	default:
		t.Fatalf("no component %q", component)
	}
	return err
}

func withoutFlag(args []string, name string) []string {
	var out []string
	for _, a := range args {
		if a != name && !strings.HasPrefix(a, name+"=") {
			out = append(out, a)
		}
	}
	return out
}
