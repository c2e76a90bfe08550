package chart

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/ebb-dev/ebb/activator"
	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/internal/logging"
	"github.com/ebb-dev/ebb/scaler"
	"github.com/ebb-dev/ebb/webhook"
)

// flagReleases cover both TLS modes, both suffixes and changed ports.
var flagReleases = []release{
	defaultRelease,
	{name: "team1", namespace: "team1-ebb", sets: []string{"groupSuffix=team1.example.com", "certManager.enabled=false",
		"logFormat=text", "logLevel=debug", "scaler.port=9191", "activator.port=8888", "sidecar.adminPort=9022",
		"sidecar.resources.limits.cpu=1", "activator.coldStartTimeout=30s", "activator.queueSize=50", "activator.maxHeld=500",
		"activator.pools[0].name=gold", "activator.pools[0].maxHeld=900", "activator.pools[0].routeSelector.matchLabels.tier=gold",
		"activator.drainTimeout=45s", "webhook.adminPort=9081", "webhook.metricsPort=9080",
		"scaleTargets={workers.example.com,rollouts.argoproj.io}"}},
}

// TestArgsParse runs each Deployment's args and env through the binary's
// own option parser and validation: a flag the chart passes that a binary
// lacks, or a value it refuses, fails here, not in a crash-looping pod.
func TestArgsParse(t *testing.T) {
	for _, r := range flagReleases {
		objs := render(t, r)
		suffix := "ebb.dev"
		if r.name == "team1" {
			suffix = "team1.example.com"
		}
		prefix := fullname(r)
		var wantTargets []string // scaleTargets, as both binaries take them
		if r.name == "team1" {
			wantTargets = []string{"workers.example.com", "rollouts.argoproj.io"}
		}
		wantLog := logging.Options{Level: "info", Format: "json"}
		if r.name == "team1" {
			wantLog = logging.Options{Level: "debug", Format: "text"}
		}

		t.Run(r.name+"/activator", func(t *testing.T) {
			d := find(t, objs, "Deployment", prefix+"-activator")
			env := containerEnv(t, d)
			for _, k := range []string{"POD_NAME", "POD_NAMESPACE", "POD_IP"} {
				if _, ok := env[k]; !ok {
					t.Errorf("activator env lacks %s (downward API)", k)
				}
			}
			o, err := activator.ParseOptions(containerArgs(t, d), func(k string) string { return env[k] })
			if err != nil {
				t.Fatalf("ebb-activator refuses the chart's args: %v", err)
			}
			if o.Log != wantLog || !o.LeaderElect {
				t.Errorf("activator logs %+v (want %+v), leader election %v", o.Log, wantLog, o.LeaderElect)
			}
			if d := cmp.Diff(wantTargets, o.ScaleTargets); d != "" {
				t.Errorf("activator --scale-targets (-want +got):\n%s", d)
			}
			if o.GroupSuffix != suffix || o.ScalerService != r.namespace+"/"+prefix+"-scaler:grpc" {
				t.Errorf("activator suffix %q, scaler service %q", o.GroupSuffix, o.ScalerService)
			}
			if got := containerPort(t, d, "http"); o.HandoffPort != got {
				t.Errorf("activator hands off on port %d, its container port http is %d", o.HandoffPort, got)
			}
		})

		if r.name == "team1" {
			t.Run(r.name+"/activator-pool", func(t *testing.T) {
				d := find(t, objs, "Deployment", prefix+"-activator-gold")
				env := containerEnv(t, d)
				o, err := activator.ParseOptions(containerArgs(t, d), func(k string) string { return env[k] })
				if err != nil {
					t.Fatalf("ebb-activator refuses the pool's args: %v", err)
				}
				// The pool's own values over the activator's.
				if o.Pool != "gold" || o.PoolsConfigMap != prefix+"-activator-pools" || o.MaxHeld != 900 || o.QueueSize != 50 || o.ColdStartTimeout != 30*time.Second {
					t.Errorf("pool activator options: pool %q, ConfigMap %q, maxHeld %d, queueSize %d, cold-start timeout %v", o.Pool, o.PoolsConfigMap, o.MaxHeld, o.QueueSize, o.ColdStartTimeout)
				}
				sel, err := labels.Parse(o.ActivatorSelector)
				if err != nil {
					t.Fatal(err)
				}
				tmpl, _, _ := unstructured.NestedStringMap(d.Object, "spec", "template", "metadata", "labels")
				def := find(t, objs, "Deployment", prefix+"-activator")
				defLabels, _, _ := unstructured.NestedStringMap(def.Object, "spec", "template", "metadata", "labels")
				if !sel.Matches(labels.Set(tmpl)) || sel.Matches(labels.Set(defLabels)) {
					t.Errorf("--activator-selector %q must select the pool's pods (%v) and not the default pool's (%v)", sel, tmpl, defLabels)
				}
				dsel, _ := activator.ParseOptions(containerArgs(t, def), func(k string) string { return containerEnv(t, def)[k] })
				if s, _ := labels.Parse(dsel.ActivatorSelector); s.Matches(labels.Set(tmpl)) {
					t.Errorf("the default pool's --activator-selector %q selects pool gold's pods", s)
				}
			})
		}

		t.Run(r.name+"/scaler", func(t *testing.T) {
			d := find(t, objs, "Deployment", prefix+"-scaler")
			env := containerEnv(t, d)
			o, err := scaler.ParseOptions(containerArgs(t, d), func(k string) string { return env[k] })
			if err != nil {
				t.Fatalf("ebb-scaler refuses the chart's args: %v", err)
			}
			if o.Log != wantLog {
				t.Errorf("scaler logs %+v, want %+v", o.Log, wantLog)
			}
			if o.GroupSuffix != suffix || o.GRPCAddr != ":"+itoa(containerPort(t, d, "grpc")) {
				t.Errorf("scaler suffix %q, gRPC address %q", o.GroupSuffix, o.GRPCAddr)
			}
		})

		t.Run(r.name+"/webhook", func(t *testing.T) {
			d := find(t, objs, "Deployment", prefix+"-webhook")
			env := containerEnv(t, d)
			o, err := webhook.ParseOptions(containerArgs(t, d), func(k string) string { return env[k] })
			if err != nil {
				t.Fatalf("ebb-webhook refuses the chart's args: %v", err)
			}
			if o.Log != wantLog {
				t.Errorf("webhook logs %+v, want %+v", o.Log, wantLog)
			}
			if d := cmp.Diff(wantTargets, o.ScaleTargets); d != "" {
				t.Errorf("webhook --scale-targets (-want +got):\n%s", d)
			}
			if o.GroupSuffix != suffix || o.WebhookPort != containerPort(t, d, "webhook") {
				t.Errorf("webhook suffix %q, port %d", o.GroupSuffix, o.WebhookPort)
			}
			if o.Namespace == "" || !o.LeaderElect {
				t.Errorf("webhook namespace %q, leader election %v", o.Namespace, o.LeaderElect)
			}
			for _, probe := range []string{"livenessProbe", "readinessProbe"} {
				port, _ := containers(t, d)[0][probe].(map[string]any)["httpGet"].(map[string]any)["port"].(string)
				if addr := ":" + itoa(containerPort(t, d, port)); addr != o.HealthAddr {
					t.Errorf("%s probes %s, the webhook serves health on %s", probe, addr, o.HealthAddr)
				}
			}
		})

		t.Run(r.name+"/webhook-configuration", func(t *testing.T) {
			names := groupsuffix.MustNew(suffix)
			got := find(t, objs, "MutatingWebhookConfiguration", webhook.ConfigurationName(names))
			var gotMWC admissionregistrationv1.MutatingWebhookConfiguration
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(got.Object, &gotMWC); err != nil {
				t.Fatal(err)
			}
			port := int32(443)
			want := webhook.Configuration(names, webhook.ConfigurationOptions{
				FailurePolicy:  admissionregistrationv1.Fail,
				TimeoutSeconds: 5,
				ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{
					Namespace: r.namespace, Name: prefix + "-webhook", Port: &port,
				}},
			})
			if diff := cmp.Diff(want.Webhooks, gotMWC.Webhooks); diff != "" {
				t.Errorf("webhooks differ from webhook.Configuration (-code +chart):\n%s", diff)
			}
			gotV := find(t, objs, "ValidatingWebhookConfiguration", webhook.ValidatingConfigurationName(names))
			var gotVWC admissionregistrationv1.ValidatingWebhookConfiguration
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(gotV.Object, &gotVWC); err != nil {
				t.Fatal(err)
			}
			wantV := webhook.ValidatingConfiguration(names, webhook.ConfigurationOptions{
				TimeoutSeconds: 5,
				ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{
					Namespace: r.namespace, Name: prefix + "-webhook", Port: &port,
				}},
			})
			if diff := cmp.Diff(wantV.Webhooks, gotVWC.Webhooks); diff != "" {
				t.Errorf("validating webhooks differ from webhook.ValidatingConfiguration (-code +chart):\n%s", diff)
			}
		})
	}
}

func containerPort(t testing.TB, d interface{ UnstructuredContent() map[string]any }, name string) int {
	t.Helper()
	cs := d.UnstructuredContent()["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)
	for _, p := range cs[0].(map[string]any)["ports"].([]any) {
		p := p.(map[string]any)
		if p["name"] == name {
			return number(p["containerPort"])
		}
	}
	t.Fatalf("no container port %q", name)
	return 0
}

func itoa(i int) string { return strconv.Itoa(i) }

// fullname is the chart's ebb.fullname of a release without overrides.
func fullname(r release) string {
	if strings.Contains(r.name, "ebb") {
		return r.name
	}
	return r.name + "-ebb"
}
