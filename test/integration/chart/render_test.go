package chart

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/ebb-dev/ebb/test/docs"
	"github.com/ebb-dev/ebb/test/repo"
)

var (
	defaultRelease = release{name: "ebb", namespace: "ebb-system"}
	team1Release   = release{name: "team1", namespace: "team1-ebb", sets: []string{"groupSuffix=team1.example.com"}}
)

func TestLint(t *testing.T) {
	for _, sets := range [][]string{
		nil,
		{"groupSuffix=team1.example.com"},
		{"groupSuffix=team1.example.com", "certManager.enabled=false", "serviceMonitor.enabled=true", "podMonitor.enabled=true", "dashboard.enabled=true",
			"networkPolicy.enabled=true", "networkPolicy.namespaces={shop}"},
	} {
		args := []string{"lint", "--strict", chartDir(t)}
		for _, s := range sets {
			args = append(args, "--set", s)
		}
		out, _, err := helm(t, args...)
		if err != nil {
			t.Errorf("helm lint with %v: %v\n%s", sets, err, out)
			continue
		}
		if strings.Contains(out, "[WARNING]") || strings.Contains(out, "[ERROR]") || !strings.Contains(out, "0 chart(s) failed") {
			t.Errorf("helm lint with %v is not clean:\n%s", sets, out)
		}
	}
}

// TestRenderDefault checks the objects of a default install: what a user
// lists with kubectl after `helm install ebb charts/ebb -n ebb-system`.
func TestRenderDefault(t *testing.T) {
	objs := render(t, defaultRelease)
	want := []string{
		"Certificate ebb-system/ebb-ca",
		"Certificate ebb-system/ebb-webhook",
		"ClusterRole ebb-activator.ebb.dev",
		"ClusterRole ebb-approutes-view.ebb.dev",
		"ClusterRole ebb-routepolicies-edit.ebb.dev",
		"ClusterRole ebb-routepolicies-view.ebb.dev",
		"ClusterRole ebb-scaler.ebb.dev",
		"ClusterRole ebb-webhook.ebb.dev",
		"ClusterRoleBinding ebb-activator.ebb.dev",
		"ClusterRoleBinding ebb-scaler.ebb.dev",
		"ClusterRoleBinding ebb-webhook.ebb.dev",
		"ConfigMap ebb-system/ebb-activator-pools",
		"CustomResourceDefinition approutes.routing.ebb.dev",
		"CustomResourceDefinition domainclaims.routing.ebb.dev",
		"CustomResourceDefinition routepolicies.routing.ebb.dev",
		"Deployment ebb-system/ebb-activator",
		"Deployment ebb-system/ebb-scaler",
		"Deployment ebb-system/ebb-webhook",
		"Issuer ebb-system/ebb-ca",
		"Issuer ebb-system/ebb-selfsigned",
		"MutatingWebhookConfiguration sidecar-injector.ebb.dev",
		"PodDisruptionBudget ebb-system/ebb-activator",
		"PodDisruptionBudget ebb-system/ebb-scaler",
		"PodDisruptionBudget ebb-system/ebb-webhook",
		"Role ebb-system/ebb-activator",
		"Role ebb-system/ebb-webhook",
		"RoleBinding ebb-system/ebb-activator",
		"RoleBinding ebb-system/ebb-webhook",
		"Service ebb-system/ebb-activator",
		"Service ebb-system/ebb-scaler",
		"Service ebb-system/ebb-webhook",
		"ServiceAccount ebb-system/ebb-activator",
		"ServiceAccount ebb-system/ebb-scaler",
		"ServiceAccount ebb-system/ebb-webhook",
		"ValidatingWebhookConfiguration routepolicy-validator.ebb.dev",
	}
	if diff := cmp.Diff(want, ids(objs)); diff != "" {
		t.Errorf("objects (-want +got):\n%s", diff)
	}
	for _, d := range ofKind(objs, "Deployment") {
		if got := number(d.Object["spec"].(map[string]any)["replicas"]); got != 2 {
			t.Errorf("%s: %d replicas, want 2", id(d), got)
		}
		// The kubelet's service links would give the webhook
		// EBB_WEBHOOK_PORT=tcp://<ClusterIP>:443 from its own Service
		// (ebb-webhook), shadowing its --port option's env fallback: the
		// pods crash-looped under the real kubelet.
		if links, found, _ := unstructured.NestedBool(d.Object, "spec", "template", "spec", "enableServiceLinks"); !found || links {
			t.Errorf("%s: enableServiceLinks is %v (set: %v), want false: Service env vars collide with EBB_* options", id(d), links, found)
		}
		for _, c := range containers(t, d) {
			if c["command"] != nil {
				t.Errorf("%s: container %s sets command; the image's entrypoint must run (flags go in args)", id(d), c["name"])
			}
			for _, probe := range []string{"livenessProbe", "readinessProbe", "startupProbe"} {
				if c[probe] == nil {
					t.Errorf("%s: container %s has no %s", id(d), c["name"], probe)
				}
			}
			if c["resources"] == nil {
				t.Errorf("%s: container %s has no resources", id(d), c["name"])
			}
		}
	}
	// cert-manager mode: the CA of the serving certificate is injected.
	mwc := find(t, objs, "MutatingWebhookConfiguration", "sidecar-injector.ebb.dev")
	if got := mwc.GetAnnotations()["cert-manager.io/inject-ca-from"]; got != "ebb-system/ebb-webhook" {
		t.Errorf("inject-ca-from = %q, want ebb-system/ebb-webhook (the serving Certificate)", got)
	}
	cert := find(t, objs, "Certificate", "ebb-webhook")
	dns, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
	if diff := cmp.Diff([]string{"ebb-webhook.ebb-system.svc", "ebb-webhook.ebb-system.svc.cluster.local"}, dns); diff != "" {
		t.Errorf("serving certificate names (-want +got):\n%s", diff)
	}
	secret, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
	if got := secretVolume(t, find(t, objs, "Deployment", "ebb-webhook")); got != secret {
		t.Errorf("webhook mounts Secret %q, the Certificate writes %q", got, secret)
	}
}

// TestRenderSelfSigned: the webhook makes its own CA and keeps it in a
// Secret that no render can wipe.
func TestRenderSelfSigned(t *testing.T) {
	r := release{name: "ebb", namespace: "ebb-system", sets: []string{"certManager.enabled=false"}}
	objs := render(t, r)
	for _, kind := range []string{"Certificate", "Issuer"} {
		if got := ofKind(objs, kind); len(got) > 0 {
			t.Errorf("self-signed mode renders %s", ids(got))
		}
	}
	mwc := find(t, objs, "MutatingWebhookConfiguration", "sidecar-injector.ebb.dev")
	if _, ok := mwc.GetAnnotations()["cert-manager.io/inject-ca-from"]; ok {
		t.Error("self-signed mode keeps cert-manager's inject-ca-from annotation")
	}
	// Rendered without a cluster (helm template, GitOps tools): no data at
	// all, so applying it never writes empty keys over the CA; Opaque, the
	// one type valid without keys (ebb-webhook keeps whatever type it finds).
	s := find(t, objs, "Secret", "ebb-webhook-selfsigned")
	if got, _, _ := unstructured.NestedString(s.Object, "type"); got != "Opaque" {
		t.Errorf("Secret type %q, want Opaque", got)
	}
	if data, ok := s.Object["data"]; ok {
		t.Errorf("offline render writes the Secret's data %v: applied, it would wipe the webhook's CA", data)
	}
	args := containerArgs(t, find(t, objs, "Deployment", "ebb-webhook"))
	for _, want := range []string{"--tls-mode=self-signed", "--tls-secret=ebb-webhook-selfsigned", "--service-name=ebb-webhook"} {
		if !contains(args, want) {
			t.Errorf("webhook args %q lack %s", args, want)
		}
	}
	if got := secretVolume(t, find(t, objs, "Deployment", "ebb-webhook")); got != "" {
		t.Errorf("self-signed webhook mounts Secret %q; it writes its files to an emptyDir", got)
	}
}

// TestUninstallKeepsTheCRD: helm uninstall keeps the AppRoute CRD, and with
// it the users' AppRoutes, unless crd.keep=false.
func TestUninstallKeepsTheCRD(t *testing.T) {
	for keep, sets := range map[bool][]string{true: nil, false: {"crd.keep=false"}} {
		crd := ofKind(render(t, release{name: "ebb", namespace: "ebb-system", sets: sets}), "CustomResourceDefinition")[0]
		got := crd.GetAnnotations()["helm.sh/resource-policy"]
		if (got == "keep") != keep {
			t.Errorf("crd.keep=%v: helm.sh/resource-policy %q", keep, got)
		}
	}
}

// TestCustomSuffixLeavesNoDefault renders team1.example.com: not one
// "ebb.dev" may be left anywhere (keys, groups, names, flags, NOTES).
func TestCustomSuffixLeavesNoDefault(t *testing.T) {
	full := append([]string{}, team1Release.sets...)
	full = append(full, "serviceMonitor.enabled=true", "podMonitor.enabled=true", "dashboard.enabled=true", "networkPolicy.enabled=true", "networkPolicy.namespaces={shop}")
	for _, r := range []release{
		team1Release,
		{name: "team1", namespace: "team1-ebb", sets: append(full, "certManager.enabled=false")},
		{name: "team1", namespace: "team1-ebb", sets: full},
	} {
		text := templateText(t, r)
		for i, line := range strings.Split(text, "\n") {
			if strings.Contains(line, "ebb.dev") {
				t.Errorf("%v: line %d still names the default suffix: %s", r.sets, i+1, line)
			}
		}
		objs, err := decode(text)
		if err != nil {
			t.Fatal(err)
		}
		find(t, objs, "CustomResourceDefinition", "approutes.routing.team1.example.com")
		find(t, objs, "CustomResourceDefinition", "domainclaims.routing.team1.example.com")
		find(t, objs, "MutatingWebhookConfiguration", "sidecar-injector.team1.example.com")
		for _, d := range ofKind(objs, "Deployment") {
			if args := containerArgs(t, d); !contains(args, "--api-group-suffix=team1.example.com") {
				t.Errorf("%s: args %q lack --api-group-suffix=team1.example.com", id(d), args)
			}
		}
	}
	notes := installNotes(t, team1Release)
	if strings.Contains(notes, "ebb.dev") {
		t.Errorf("NOTES name the default suffix:\n%s", notes)
	}
}

// standardKeys are label and annotation keys every chart shares by design.
var standardKeys = regexp.MustCompile(`^(app\.kubernetes\.io/[a-z-]+|helm\.sh/(chart|resource-policy)|cert-manager\.io/inject-ca-from|kubernetes\.io/(hostname|metadata\.name)|rbac\.authorization\.k8s\.io/aggregate-to-(view|edit|admin)|pod-security\.kubernetes\.io/enforce|grafana_dashboard|controller-gen\.kubebuilder\.io/version)$`)

// TestTwoReleasesShareNothing: a second instance (other suffix, other
// namespace) shares no cluster-scoped name, no ebb label or annotation key
// and no CRD with the first; every ebb key carries its own suffix.
func TestTwoReleasesShareNothing(t *testing.T) {
	// Both with an activator pool of the same name: its objects, Lease and
	// labels still differ.
	extra := []string{"scaler.tls.enabled=true", "serviceMonitor.enabled=true", "podMonitor.enabled=true", "dashboard.enabled=true", "networkPolicy.enabled=true", "networkPolicy.namespaces={shop}",
		"activator.pools[0].name=gold", "federation.enabled=true", "federation.member.enabled=true"}
	for _, certManager := range []string{"true", "false"} {
		a := release{name: "ebb", namespace: "ebb-system", sets: append([]string{"certManager.enabled=" + certManager}, extra...)}
		b := release{name: "team1", namespace: "team1-ebb", sets: append([]string{"certManager.enabled=" + certManager, "groupSuffix=team1.example.com"}, extra...)}
		ra, rb := render(t, a), render(t, b)

		clusterA, clusterB := clusterScoped(ra), clusterScoped(rb)
		if shared := intersect(clusterA, clusterB); len(shared) > 0 {
			t.Errorf("certManager=%s: both releases own %q", certManager, shared)
		}
		for _, n := range clusterB {
			if !strings.Contains(n, "team1.example.com") {
				t.Errorf("cluster-scoped %s does not carry the suffix", n)
			}
			if !strings.Contains(n, "team1") {
				t.Errorf("cluster-scoped %s does not carry the release name", n)
			}
		}
		// Namespaced objects of one release never land in the other's
		// namespace (the NetworkPolicies in app namespaces differ by name).
		if shared := intersect(namespacedIDs(ra), namespacedIDs(rb)); len(shared) > 0 {
			t.Errorf("certManager=%s: both releases write %q", certManager, shared)
		}
		keysA, keysB := ebbKeys(ra), ebbKeys(rb)
		if shared := intersect(keysA, keysB); len(shared) > 0 {
			t.Errorf("certManager=%s: both releases use the keys %q", certManager, shared)
		}
		for _, k := range keysB {
			if !strings.HasPrefix(k, "team1.example.com/") {
				t.Errorf("key %q of the team1 release is not under its suffix", k)
			}
		}
		if len(keysB) == 0 {
			t.Error("found no ebb key at all: the selectors were not read")
		}
		// kubectl get <short name> and <category> name one instance's
		// AppRoutes, never both.
		var kubectlNames [2][]string
		for i, objs := range [][]*unstructured.Unstructured{ra, rb} {
			crd := ofKind(objs, "CustomResourceDefinition")[0]
			short, _, _ := unstructured.NestedStringSlice(crd.Object, "spec", "names", "shortNames")
			categories, _, _ := unstructured.NestedStringSlice(crd.Object, "spec", "names", "categories")
			if len(short) == 0 || len(categories) == 0 {
				t.Errorf("CRD of release %d: short names %q, categories %q", i, short, categories)
			}
			kubectlNames[i] = append(short, categories...)
		}
		if shared := intersect(kubectlNames[0], kubectlNames[1]); len(shared) > 0 {
			t.Errorf("certManager=%s: both instances' CRDs answer to %q", certManager, shared)
		}
	}
}

func clusterScoped(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objs {
		if o.GetNamespace() == "" {
			out = append(out, o.GetKind()+" "+o.GetName())
		}
	}
	sort.Strings(out)
	return out
}

func namespacedIDs(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objs {
		if o.GetNamespace() != "" {
			out = append(out, id(o))
		}
	}
	return out
}

// ebbKeys are the label, annotation and selector keys of objs that are not
// standard ones.
func ebbKeys(objs []*unstructured.Unstructured) []string {
	seen := map[string]bool{}
	var walk func(path []string, v any)
	walk = func(path []string, v any) {
		switch v := v.(type) {
		case map[string]any:
			last := ""
			if len(path) > 0 {
				last = path[len(path)-1]
			}
			for k, child := range v {
				if last == "labels" || last == "annotations" || last == "matchLabels" {
					seen[k] = true
				}
				if k == "key" && last == "" && len(path) > 1 && path[len(path)-2] == "matchExpressions" {
					if s, ok := child.(string); ok {
						seen[s] = true
					}
				}
				walk(append(path, k), child)
			}
		case []any:
			for _, child := range v {
				walk(append(path, ""), child)
			}
		}
	}
	for _, o := range objs {
		walk(nil, o.Object)
	}
	var out []string
	for k := range seen {
		if !standardKeys.MatchString(k) {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

func intersect(a, b []string) []string {
	in := map[string]bool{}
	for _, s := range a {
		in[s] = true
	}
	var out []string
	for _, s := range b {
		if in[s] {
			out = append(out, s)
		}
	}
	return out
}

// TestSchemaRejectsBadValues: values.schema.json (or the templates) refuse
// what would install a broken instance, naming the value.
func TestSchemaRejectsBadValues(t *testing.T) {
	for _, tc := range []struct {
		set, mention string
	}{
		{"groupSuffix=ebb", "groupSuffix"},
		{"groupSuffix=Ebb.dev", "groupSuffix"},
		{"groupSuffix=-ebb.dev", "groupSuffix"},
		{"groupSuffix=ebb..dev", "groupSuffix"},
		{"groupSuffix=ebb_dev.io", "groupSuffix"},
		{"groupSuffix=" + strings.Repeat("a", 170) + ".io", "groupSuffix"},
		{"groupSuffix=", "groupSuffix"},
		{"webhook.failurePolicy=Sometimes", "failurePolicy"},
		{"webhook.timeout=10s", "timeout"},
		{"webhook.timeout=0s", "timeout"},
		{"webhook.timeout=1.5s", "timeout"},
		{"webhook.timeout=5", "timeout"},
		{"webhook.certCheckInterval=5s", "certCheckInterval"},
		{"webhook.certCheckInterval=0.5m", "certCheckInterval"},
		{"webhook.replicas=0", "replicas"},
		{"webhook.image.pullPolicy=Sometimes", "pullPolicy"},
		{"webhook.replica=3", "replica"},
		{"scaler.port=70000", "port"},
		{"sidecar.adminPort=0", "adminPort"},
		{"sidecar.resources.requests.cpu=lots", "cpu"},
		{"sidecar.resources.requests.gpu=1", "gpu"},
		{"sidecar.drainTimeout=20", "drainTimeout"},
		{"activator.coldStartTimeout=forever", "coldStartTimeout"},
		{"activator.queueSize=0", "queueSize"},
		{"activator.maxHeld=10", "maxHeld"},
		{"logFormat=xml", "logFormat"},
		{"certManager.enabled=maybe", "enabled"},
		{"certManager.issuerRef.kind=ClusterIssuer", "name"},
		{"networkPolicy.enabled=true", "networkPolicy.namespaces"},
		{"networkPolicy.namespaces={Shop}", "namespaces"},
		{"activator.pools[0].name=default", "name"},
		{"activator.pools[0].name=averyverylongpool", "name"},
		{"activator.pools[0].name=gold,activator.pools[1].name=gold", `"gold" listed twice`},
		{"activator.pools[0].name=gold,activator.pools[0].maxHeld=10", "activator.pools[gold].maxHeld 10"},
		{"activator.pools[0].name=gold,activator.pools[0].port=9000", "port"},
		{"activator.pools[0].name=gold,activator.pools[0].routeSelector.matchExpressions[0].key=tier,activator.pools[0].routeSelector.matchExpressions[0].operator=Is", "operator"},
	} {
		_, stderr, err := helm(t, "template", "ebb", chartDir(t), "--namespace", "ebb-system", "--set", tc.set)
		if err == nil {
			t.Errorf("--set %s was accepted", tc.set)
			continue
		}
		if !strings.Contains(stderr, tc.mention) {
			t.Errorf("--set %s: the error does not mention %q:\n%s", tc.set, tc.mention, stderr)
		}
	}
	for _, set := range []string{"groupSuffix=team1.example.com", "groupSuffix=a.b", "webhook.failurePolicy=Ignore", "webhook.timeout=1s",
		"sidecar.resources.limits.cpu=500m", "certManager.issuerRef.name=corp-ca", "activator.coldStartTimeout=1m30s",
		"webhook.certCheckInterval=1m", "webhook.certCheckInterval=90s", "webhook.certCheckInterval=2h30m",
		"activator.pools[0].name=gold,activator.pools[0].replicas=1,activator.pools[0].routeSelector.matchLabels.tier=gold"} {
		if _, _, err := helm(t, "template", "ebb", chartDir(t), "--namespace", "ebb-system", "--set", set); err != nil {
			t.Errorf("--set %s was refused: %v", set, err)
		}
	}
}

// TestCRDMatchesConfig keeps the chart's CRDs equal to the ones
// controller-gen generates into config/crd, up to their group and name:
// AppRoute, DomainClaim and RoutePolicy in every release, FederatedScale with
// federation.enabled. After
// `make manifests`, refresh the chart's copies with `go test
// ./test/integration/chart -run CRD -update`.
func TestCRDMatchesConfig(t *testing.T) {
	for _, crd := range []struct{ file, plural, short string }{
		{"routing.ebb.dev_approutes.yaml", "approutes", "ar"},
		{"routing.ebb.dev_federatedscales.yaml", "federatedscales", "fs"},
		{"routing.ebb.dev_domainclaims.yaml", "domainclaims", "dc"},
		{"routing.ebb.dev_routepolicies.yaml", "routepolicies", "rp"},
	} {
		t.Run(crd.plural, func(t *testing.T) {
			generated := filepath.Join(repo.MustRoot(t), "config", "crd", crd.file)
			copyPath := filepath.Join(chartDir(t), "files", "crds", crd.file)
			want, err := os.ReadFile(generated)
			if err != nil {
				t.Fatal(err)
			}
			if *update {
				if err := os.WriteFile(copyPath, want, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := os.ReadFile(copyPath)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(string(want), string(got)); diff != "" {
				t.Fatalf("%s differs from config/crd (run go test ./test/integration/chart -run CRD -update) (-config +chart):\n%s", copyPath, diff)
			}
			var base map[string]any
			if err := yaml.Unmarshal(want, &base); err != nil {
				t.Fatal(err)
			}
			for _, r := range []release{defaultRelease, team1Release} {
				suffix := "ebb.dev"
				for _, s := range r.sets {
					if v, ok := strings.CutPrefix(s, "groupSuffix="); ok {
						suffix = v
					}
				}
				r.sets = append(append([]string(nil), r.sets...), "federation.enabled=true")
				var rendered *unstructured.Unstructured
				crds := ofKind(render(t, r), "CustomResourceDefinition")
				for _, c := range crds {
					if c.GetName() == crd.plural+".routing."+suffix {
						rendered = c.DeepCopy()
					}
				}
				if len(crds) != 4 || rendered == nil {
					t.Fatalf("%d CRDs rendered with federation.enabled, want 4 with %s.routing.%s", len(crds), crd.plural, suffix)
				}
				if labels := rendered.GetLabels(); labels["app.kubernetes.io/instance"] != r.name {
					t.Errorf("CRD labels %v lack the release", labels)
				}
				rendered.SetLabels(nil)
				wantCRD := (&unstructured.Unstructured{Object: base}).DeepCopy()
				wantCRD.SetName(crd.plural + ".routing." + suffix)
				if err := unstructured.SetNestedField(wantCRD.Object, "routing."+suffix, "spec", "group"); err != nil {
					t.Fatal(err)
				}
				// What the chart changes on purpose: uninstall keeps it, and
				// each instance answers to its own short name and category.
				annotations := wantCRD.GetAnnotations()
				annotations["helm.sh/resource-policy"] = "keep"
				wantCRD.SetAnnotations(annotations)
				if suffix != "ebb.dev" {
					id := strings.ReplaceAll(suffix, ".", "-")
					_ = unstructured.SetNestedStringSlice(wantCRD.Object, []string{crd.short + "-" + id}, "spec", "names", "shortNames")
					_ = unstructured.SetNestedStringSlice(wantCRD.Object, []string{"ebb-" + id}, "spec", "names", "categories")
				}
				if diff := cmp.Diff(wantCRD.Object, rendered.Object); diff != "" {
					t.Errorf("suffix %s: CRD (-config, renamed +chart):\n%s", suffix, diff)
				}
			}
			if n := len(ofKind(render(t, defaultRelease), "CustomResourceDefinition")); n != 3 {
				t.Errorf("%d CRDs rendered by default, want AppRoute's, DomainClaim's and RoutePolicy's", n)
			}
		})
	}
}

func TestNotes(t *testing.T) {
	for _, tc := range []struct {
		r    release
		want []string
	}{
		{defaultRelease, []string{
			"kubectl label namespace <your-namespace> ebb.dev/inject=enabled",
			"ebb.dev/app: <your-app>",
			"ebb.dev/hosts:",
			"- type: external-push",
			"scalerAddress: ebb-scaler.ebb-system:9090",
			"app: <your-app>",
			`targetConcurrency: "100"`,
		}},
		{release{name: "team1", namespace: "team1-ebb", sets: []string{"groupSuffix=team1.example.com", "scaler.port=9191"}}, []string{
			"kubectl label namespace <your-namespace> team1.example.com/inject=enabled",
			"team1.example.com/app: <your-app>",
			"scalerAddress: team1-ebb-scaler.team1-ebb:9191",
		}},
		{release{name: "hub", namespace: "ebb-system", sets: []string{"groupSuffix=team1.example.com", "federation.enabled=true", "federation.member.enabled=true"}}, []string{
			"label secret member-<name> team1.example.com/member-cluster=<name>",
			"kubectl get federatedscales.routing.team1.example.com -A",
			"create token hub-ebb-federation-member",
		}},
	} {
		notes := installNotes(t, tc.r)
		for _, w := range tc.want {
			if !strings.Contains(notes, w) {
				t.Errorf("%s: NOTES lack %q:\n%s", tc.r.name, w, notes)
			}
		}
		// The ScaledObject is copied as is: it must be valid YAML.
		i := strings.Index(notes, "apiVersion: keda.sh/v1alpha1")
		if i < 0 {
			t.Fatalf("NOTES have no ScaledObject:\n%s", notes)
		}
		block := notes[i:]
		if j := strings.Index(block, "\n\n"); j > 0 {
			block = block[:j]
		}
		var so struct {
			Kind string
			Spec struct {
				Triggers []struct {
					Type     string
					Metadata map[string]string
				}
			}
		}
		if err := yaml.Unmarshal([]byte(block), &so); err != nil {
			t.Errorf("%s: the ScaledObject in NOTES does not parse: %v\n%s", tc.r.name, err, block)
		} else if so.Kind != "ScaledObject" || len(so.Spec.Triggers) != 1 || so.Spec.Triggers[0].Metadata["app"] == "" {
			t.Errorf("%s: the ScaledObject in NOTES parsed as %+v", tc.r.name, so)
		}
	}
}

// installNotes are the NOTES `helm install` prints (client-side dry run).
func installNotes(t *testing.T, r release) string {
	t.Helper()
	out, _, err := helm(t, append([]string{"install", "--dry-run=client"}, r.args()...)...)
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(out, "NOTES:")
	if i < 0 {
		t.Fatalf("helm install --dry-run printed no NOTES:\n%s", out)
	}
	return out[i:]
}

// TestDashboard: the dashboard ships only when asked, is valid JSON, is one
// per instance, and queries only metrics the components export.
func TestDashboard(t *testing.T) {
	dashboards := func(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
		var out []*unstructured.Unstructured
		for _, cm := range ofKind(objs, "ConfigMap") {
			if !strings.HasSuffix(cm.GetName(), "-activator-pools") {
				out = append(out, cm)
			}
		}
		return out
	}
	if got := dashboards(render(t, defaultRelease)); len(got) != 0 {
		t.Errorf("dashboard off by default, got %s", ids(got))
	}
	exported := docs.ExportedMetrics(t)
	uids := map[string]string{}
	for _, r := range []release{
		{name: "ebb", namespace: "ebb-system", sets: []string{"dashboard.enabled=true"}},
		{name: "team1", namespace: "team1-ebb", sets: []string{"dashboard.enabled=true", "groupSuffix=team1.example.com"}},
	} {
		cms := dashboards(render(t, r))
		if len(cms) != 1 {
			t.Fatalf("%s: %d ConfigMaps, want the dashboard", r.name, len(cms))
		}
		if cms[0].GetLabels()["grafana_dashboard"] != "1" {
			t.Errorf("%s: dashboard ConfigMap lacks grafana_dashboard=1 (Grafana's sidecar finds it by that label)", r.name)
		}
		data, _, _ := unstructured.NestedStringMap(cms[0].Object, "data")
		if len(data) != 1 {
			t.Fatalf("%s: dashboard data has %d keys", r.name, len(data))
		}
		for _, text := range data {
			var d struct {
				UID, Title string
				Templating struct{ List []struct{ Name, Query any } }
				Panels     []struct {
					Title   string
					Targets []struct{ Expr string }
				}
			}
			if err := json.Unmarshal([]byte(text), &d); err != nil {
				t.Fatalf("%s: dashboard is not JSON: %v", r.name, err)
			}
			if other, dup := uids[d.UID]; dup || strings.Contains(text, "__EBB_") {
				t.Errorf("%s: dashboard uid %q (also %s) or a placeholder left", r.name, d.UID, other)
			}
			uids[d.UID] = r.name
			var titles []string
			for _, p := range d.Panels {
				titles = append(titles, p.Title)
				for _, tg := range p.Targets {
					for _, m := range regexp.MustCompile(`ebb_[a-z_]+`).FindAllString(tg.Expr, -1) {
						if m == "ebb_instance" {
							continue // the label the scaler and activator put on every series
						}
						if !strings.HasPrefix(m, "ebb_scaler_") && !strings.HasPrefix(m, "ebb_activator_") && !strings.HasPrefix(m, "ebb_sidecar_") {
							t.Errorf("panel %q queries %s: only ebb's own series carry ebb_instance whatever the scrape configuration", p.Title, m)
						}
						base := regexp.MustCompile(`_(bucket|count|sum)$`).ReplaceAllString(m, "")
						if !exported[m] && !exported[base] {
							t.Errorf("panel %q queries %s, which no component exports", p.Title, m)
						}
					}
				}
			}
			for _, want := range []string{"Replicas", "In flight", "Held", "Request rate", "Cold starts", "Cold start duration",
				"Request latency", "Status mix", "Cold-start phases", "Not idle, and why"} {
				if !strings.Contains(strings.Join(titles, "|"), want) {
					t.Errorf("no %q panel in %q", want, titles)
				}
			}
		}
	}
}

// TestNetworkPolicy: the app pods' sidecar data port is open to anyone,
// their admin port only to this release's scaler and activators, and their
// own ports to nobody (nothing bypasses the sidecar) unless allowOtherPorts.
func TestNetworkPolicy(t *testing.T) {
	for _, allowOther := range []bool{false, true} {
		r := release{name: "ebb", namespace: "ebb-system", sets: []string{"networkPolicy.enabled=true", "networkPolicy.namespaces={shop,blog}"}}
		if allowOther {
			r.sets = append(r.sets, "networkPolicy.allowOtherPorts=true")
		}
		t.Run(fmt.Sprintf("allowOtherPorts=%v", allowOther), func(t *testing.T) { testNetworkPolicy(t, r, allowOther) })
	}
}

func testNetworkPolicy(t *testing.T, r release, allowOther bool) {
	nps := ofKind(render(t, r), "NetworkPolicy")
	if diff := cmp.Diff([]string{"NetworkPolicy blog/ebb-sidecar-admin", "NetworkPolicy shop/ebb-sidecar-admin"}, ids(nps)); diff != "" {
		t.Fatalf("NetworkPolicies (-want +got):\n%s", diff)
	}
	var np struct {
		Spec struct {
			PodSelector struct {
				MatchExpressions []struct{ Key, Operator string }
			}
			Ingress []struct {
				From  []map[string]any
				Ports []struct {
					Protocol string
					Port     int
					EndPort  int
				}
			}
		}
	}
	b, _ := json.Marshal(nps[0].Object)
	if err := json.Unmarshal(b, &np); err != nil {
		t.Fatal(err)
	}
	if sel := np.Spec.PodSelector.MatchExpressions; len(sel) != 1 || sel[0].Key != "ebb.dev/app" || sel[0].Operator != "Exists" {
		t.Errorf("pod selector %+v, want the app pods (ebb.dev/app Exists)", sel)
	}
	// Which TCP ports may anyone reach, and which only ebb's pods?
	open, restricted := map[int]bool{}, map[int]bool{}
	for _, rule := range np.Spec.Ingress {
		for _, p := range rule.Ports {
			if p.Protocol != "TCP" {
				continue
			}
			end := max(p.EndPort, p.Port)
			for port := p.Port; port <= end; port++ {
				if len(rule.From) == 0 {
					open[port] = true
				} else {
					restricted[port] = true
				}
			}
		}
	}
	if open[8022] || !restricted[8022] {
		t.Errorf("admin port 8022: open to all %v, to ebb %v", open[8022], restricted[8022])
	}
	if !open[8012] {
		t.Errorf("the sidecar's data port 8012 is cut off")
	}
	for _, port := range []int{1, 80, 8080, 8021, 8023, 65535} {
		if open[port] != allowOther || restricted[port] {
			t.Errorf("app port %d: open to all %v, to ebb %v; want open %v (allowOtherPorts)", port, open[port], restricted[port], allowOther)
		}
	}
	from, _ := json.Marshal(np.Spec.Ingress[0].From)
	for _, want := range []string{`"ebb-scaler"`, `"ebb-activator"`, `"kubernetes.io/metadata.name":"ebb-system"`, `"app.kubernetes.io/instance"`} {
		if !strings.Contains(string(from), want) {
			t.Errorf("admin port peers %s lack %s", from, want)
		}
	}
}

func containers(t testing.TB, d *unstructured.Unstructured) []map[string]any {
	t.Helper()
	path := []string{"spec", "template", "spec", "containers"}
	if d.GetKind() == "Pod" {
		path = []string{"spec", "containers"}
	}
	cs, _, err := unstructured.NestedSlice(d.Object, path...)
	if err != nil || len(cs) == 0 {
		t.Fatalf("%s: no containers (%v)", id(d), err)
	}
	var out []map[string]any
	for _, c := range cs {
		out = append(out, c.(map[string]any))
	}
	return out
}

func containerArgs(t testing.TB, d *unstructured.Unstructured) []string {
	t.Helper()
	cs := containers(t, d)
	if len(cs) != 1 {
		t.Fatalf("%s: %d containers, want 1", id(d), len(cs))
	}
	var out []string
	for _, a := range cs[0]["args"].([]any) {
		out = append(out, a.(string))
	}
	return out
}

// containerEnv are the container's env values; downward-API ones get
// stand-ins.
func containerEnv(t testing.TB, d *unstructured.Unstructured) map[string]string {
	t.Helper()
	env := map[string]string{}
	list, _ := containers(t, d)[0]["env"].([]any)
	for _, e := range list {
		m := e.(map[string]any)
		name := m["name"].(string)
		if v, ok := m["value"].(string); ok {
			env[name] = v
		} else {
			env[name] = "downward-" + strings.ToLower(name)
		}
	}
	return env
}

func secretVolume(t testing.TB, d *unstructured.Unstructured) string {
	t.Helper()
	vols, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "volumes")
	for _, v := range vols {
		if name, ok, _ := unstructured.NestedString(v.(map[string]any), "secret", "secretName"); ok {
			return name
		}
	}
	return ""
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// number is a decoded YAML number (int64 or float64) as an int.
func number(v any) int {
	switch v := v.(type) {
	case int64:
		return int(v)
	case float64:
		return int(v)
	case int:
		return v
	}
	return -1
}
