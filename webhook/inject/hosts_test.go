package inject

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// An app may not list another namespace's cluster names, an IP literal or a
// single label (issue 34: a tenant's app listing them took shop's requests
// at zero); the refusal names each host and why.
func TestInjectRefusesOtherNamespacesNames(t *testing.T) {
	pod := appPod(func(p *corev1.Pod) {
		p.Namespace = "b"
		p.Annotations["ebb.dev/hosts"] = "api.shop.svc.cluster.local, api.shop.svc, *.shop.svc.cluster.local, *.svc.cluster.local, x.pod.cluster.local, api, 198.19.0.20, *.19.0.20, api.shop.svc.corp.example, b.example.com"
	})
	_, _, err := Inject(pod, testCfg, Policy{})
	var refusal *RefusalError
	if !errors.As(err, &refusal) {
		t.Fatalf("Inject = %v; want a *RefusalError", err)
	}
	for _, w := range []string{
		`host "api.shop.svc.cluster.local" is a cluster name of namespace "shop", which routes only to that namespace's apps`,
		`host "api.shop.svc" is a cluster name of namespace "shop"`,
		`host "*.shop.svc.cluster.local" is a cluster name of namespace "shop"`,
		`host "*.svc.cluster.local" covers the cluster domain of every namespace`,
		`host "x.pod.cluster.local" is a cluster name of namespace "x"`,
		`host "api" is a single label`,
		`host "198.19.0.20" is an IP address`,
		`host "*.19.0.20" is an IP address`,
		`host "api.shop.svc.corp.example" is a cluster name of namespace "shop"`,
		`the app's Service's own names and ClusterIP need no listing`,
	} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("message %q\nlacks %q", err.Error(), w)
		}
	}
	if strings.Contains(err.Error(), `host "b.example.com"`) {
		t.Errorf("an outside host is refused: %v", err)
	}
}

// An app may list its own namespace's cluster names.
func TestInjectAcceptsOwnClusterNames(t *testing.T) {
	pod := appPod(func(p *corev1.Pod) {
		p.Annotations["ebb.dev/hosts"] = "hello-canary.shop.svc.cluster.local,*.shop.svc,hello.example.com"
	})
	if _, _, err := Inject(pod, testCfg, Policy{}); err != nil {
		t.Fatalf("Inject: %v", err)
	}
}
