package chart

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"
)

// TestOfflineRenderKeepsTheCA applies what `helm template` renders for the
// self-signed Secret, as a GitOps tool does on every sync, over a Secret the
// webhook has filled: the CA and certificate stay.
func TestOfflineRenderKeepsTheCA(t *testing.T) {
	ctx := context.Background()
	c := lc
	r := release{name: "ebb", namespace: "offline-ebb", sets: []string{"certManager.enabled=false"}}
	if err := c.EnsureNamespace(ctx, r.namespace, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Client.CoreV1().Namespaces().Delete(context.Background(), r.namespace, metav1.DeleteOptions{})
	})
	rendered := find(t, render(t, r), "Secret", "ebb-webhook-selfsigned")
	body, err := yaml.Marshal(rendered.Object)
	if err != nil {
		t.Fatal(err)
	}
	secrets := c.Client.CoreV1().Secrets(r.namespace)
	apply := func(manager string) {
		t.Helper()
		force := true
		if _, err := secrets.Patch(ctx, rendered.GetName(), types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: manager, Force: &force}); err != nil {
			t.Fatalf("apply the rendered Secret: %v", err)
		}
	}
	apply("gitops") // the first sync creates it
	s, err := secrets.Get(ctx, rendered.GetName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Data = map[string][]byte{"ca.crt": []byte("CA"), "ca.key": []byte("CA KEY"), corev1.TLSCertKey: []byte("CERT"), corev1.TLSPrivateKeyKey: []byte("KEY")}
	if _, err := secrets.Update(ctx, s, metav1.UpdateOptions{FieldManager: "ebb-webhook"}); err != nil { // as the webhook fills it
		t.Fatal(err)
	}
	apply("gitops") // every later sync
	s, err = secrets.Get(ctx, rendered.GetName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if string(s.Data["ca.crt"]) != "CA" || string(s.Data[corev1.TLSCertKey]) != "CERT" {
		t.Errorf("an offline render applied over the webhook's Secret left %q", s.Data)
	}
}

// TestUpgradeKeepsTheSuffix: an upgrade (a render that can read the cluster)
// that changes groupSuffix is refused with what to do; the same suffix
// passes.
func TestUpgradeKeepsTheSuffix(t *testing.T) {
	ctx := context.Background()
	c := lc
	r := release{name: "ebb", namespace: "upgrade-ebb"}
	if err := c.EnsureNamespace(ctx, r.namespace, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Client.CoreV1().Namespaces().Delete(context.Background(), r.namespace, metav1.DeleteOptions{})
	})
	dyn, mapper := clients(t, c)
	d := find(t, render(t, r), "Deployment", "ebb-webhook") // as helm installed it, with groupSuffix ebb.dev
	d.SetAnnotations(map[string]string{"meta.helm.sh/release-name": r.name, "meta.helm.sh/release-namespace": r.namespace})
	mapping, err := mapper.RESTMapping(d.GroupVersionKind().GroupKind(), d.GroupVersionKind().Version)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(mapping.Resource).Namespace(r.namespace).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	upgrade := func(sets ...string) (string, error) {
		args := []string{"template", r.name, chartDir(t), "--namespace", r.namespace, "--dry-run=server", "--kubeconfig", c.Kubeconfig}
		for _, s := range sets {
			args = append(args, "--set", s)
		}
		_, stderr, err := helm(t, args...)
		return stderr, err
	}
	if _, err := upgrade(); err != nil {
		t.Fatalf("an upgrade with the same suffix is refused: %v", err)
	}
	stderr, err := upgrade("groupSuffix=team1.example.com")
	if err == nil {
		t.Fatal("an upgrade from ebb.dev to team1.example.com was accepted")
	}
	for _, want := range []string{"groupSuffix team1.example.com", "serves groupSuffix ebb.dev", "install a new release"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("the refusal does not say %q:\n%s", want, stderr)
		}
	}
}
