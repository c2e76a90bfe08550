package e2e

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/test/e2e/install"
	"github.com/ebb-dev/ebb/test/repo"
)

// readmeExample is the first YAML block under the README's "A complete
// example", as a stranger copies it.
func readmeExample(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repo.MustRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "\n## A complete example\n")
	if !ok {
		t.Fatal(`README.md has no section "A complete example"`)
	}
	_, after, ok = strings.Cut(after, "```yaml\n")
	if !ok {
		t.Fatal("no YAML block in the README's complete example")
	}
	block, _, ok := strings.Cut(after, "```")
	if !ok {
		t.Fatal("the README's YAML block does not end")
	}
	return block
}

// TestReadmeExample applies the README's complete example as written, but
// for its image (this machine has no registry but its own: the test app
// serves podinfo's port and readiness path instead), to the installed ebb
// and KEDA: the app stands at zero behind the activator, a request through
// its Service for two of its Service's own names wake
// it and are answered, and its AppRoute says all is well.
func TestReadmeExample(t *testing.T) {
	ctx := t.Context()
	const podinfo = "        image: ghcr.io/stefanprodan/podinfo:6.7.1\n"
	text := readmeExample(t)
	if !strings.Contains(text, podinfo) || !strings.Contains(text, "scalerAddress: "+ebb.ScalerAddress) {
		t.Fatalf("the README's example changed: update this test's substitutions\n%s", text)
	}
	text = strings.Replace(text, podinfo, `        image: ghcr.io/ebb-dev/ebb-test-app:dev
        env: [{name: LISTEN, value: ":9898"}, {name: READY_PATH, value: /readyz}]
`, 1)

	// kubectl create namespace shop; kubectl label namespace shop ebb.dev/inject=enabled
	if err := lc.EnsureNamespace(ctx, "shop", map[string]string{ebb.Names.InjectLabel(): "enabled"}); err != nil {
		t.Fatal(err)
	}
	objs, err := decodeYAML(text)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(lc.RestConfig)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(lc.RestConfig)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	for _, o := range objs { // kubectl apply -f
		m, err := mapper.RESTMapping(o.GroupVersionKind().GroupKind(), o.GroupVersionKind().Version)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := dyn.Resource(m.Resource).Namespace(o.GetNamespace()).Create(ctx, o, metav1.CreateOptions{FieldValidation: "Strict"}); err != nil {
			t.Fatalf("apply %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	svc, err := lc.Client.CoreV1().Services("shop").Get(ctx, "hello", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a := &install.AppAtZero{Namespace: "shop", Name: "hello", Host: "hello.shop.svc.cluster.local", URL: "http://" + svc.Spec.ClusterIP + "/"}
	if err := ebb.WaitAtZero(ctx, lc, a, 2*time.Minute); err != nil {
		t.Fatalf("the README's app never stood at zero behind the activator: %v\n%s", err, ebb.Diagnose(ctx, lc, a.Namespace, a.Name))
	}
	// The example names no other host: the Service's own names route to
	// it (an Ingress's hosts are TestBehindTraefik's, from the next section).
	for _, host := range []string{"hello.shop", "hello.shop.svc.cluster.local"} {
		if err := install.Failures(install.Send(ctx, a.URL, host, 1, 90*time.Second)); err != nil {
			t.Fatalf("a request for %s to the README's app: %v\n%s", host, err, ebb.Diagnose(ctx, lc, a.Namespace, a.Name))
		}
	}
	t.Logf("the README's example woke from zero and answered")
	route, err := ebb.AppRoute(ctx, lc, "shop", "hello")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{routingv1alpha1.ConditionReady, routingv1alpha1.ConditionSidecarReachable, routingv1alpha1.ConditionScaledByKEDA, routingv1alpha1.ConditionPodsInjected} {
		c := meta.FindStatusCondition(route.Status.Conditions, want)
		if c == nil || c.Status != metav1.ConditionTrue {
			t.Errorf("AppRoute condition %s = %+v, want True", want, c)
		}
	}
}

// decodeYAML decodes a multi-document YAML text.
func decodeYAML(text string) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(text), 4096)
	var out []*unstructured.Unstructured
	for {
		var o map[string]any
		if err := dec.Decode(&o); err == io.EOF {
			return out, nil
		} else if err != nil {
			return nil, err
		}
		if len(o) > 0 {
			out = append(out, &unstructured.Unstructured{Object: o})
		}
	}
}
