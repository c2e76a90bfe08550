package nodeagent

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

func TestExpand(t *testing.T) {
	vars := map[string]string{"PORT": "8080", "HOST": "a"}
	for in, want := range map[string]string{
		"plain":             "plain",
		"--listen=:$(PORT)": "--listen=:8080",
		"$(HOST):$(PORT)":   "a:8080",
		"$(MISSING)":        "$(MISSING)",
		"$$(PORT)":          "$(PORT)",
		"cost $5":           "cost $5",
		"$(PORT":            "$(PORT",
		"end$":              "end$",
	} {
		if got := expand(in, vars); got != want {
			t.Errorf("expand(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestImageProgram(t *testing.T) {
	for in, want := range map[string]string{
		"ebb-sidecar":                               "ebb-sidecar",
		"ghcr.io/ebb-dev/ebb-sidecar:v0.1.0":        "ebb-sidecar",
		"localhost:5000/ebb-test-app":               "ebb-test-app",
		"ghcr.io/ebb-dev/ebb-activator@sha256:abcd": "ebb-activator",
		"ghcr.io/ebb-dev/ebb-scaler:v1@sha256:abcd": "ebb-scaler",
	} {
		if got := imageProgram(in); got != want {
			t.Errorf("imageProgram(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestIPPoolSkipsNodeBlockAndReuses(t *testing.T) {
	p := newIPPool(netip.MustParsePrefix("198.18.0.0/16"))
	a, err := p.get()
	if err != nil {
		t.Fatal(err)
	}
	if a.String() != "198.18.1.1" {
		t.Errorf("first address %s, want 198.18.1.1 (198.18.0.x is the node's)", a)
	}
	b, _ := p.get()
	if a == b {
		t.Fatalf("handed out %s twice", a)
	}
	p.put(a)
	seen := map[netip.Addr]bool{}
	for range 300 {
		x, err := p.get()
		if err != nil {
			t.Fatal(err)
		}
		if seen[x] || x == b {
			t.Fatalf("handed out %s while in use", x)
		}
		if x.As4()[3] == 0 || x.As4()[3] == 255 {
			t.Fatalf("handed out network or broadcast-looking address %s", x)
		}
		seen[x] = true
	}
}

func TestPodField(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "n", UID: "u", Labels: map[string]string{"ebb.dev/app": "hello"}, Annotations: map[string]string{"a": "b"}},
		Spec:       corev1.PodSpec{NodeName: "node", ServiceAccountName: "sa"},
		Status:     corev1.PodStatus{PodIP: "198.18.1.2", HostIP: "198.18.0.1"},
	}
	var got []string
	for _, f := range []string{"metadata.name", "metadata.namespace", "metadata.uid", "metadata.labels['ebb.dev/app']", "metadata.annotations['a']", "spec.nodeName", "spec.serviceAccountName", "status.podIP", "status.hostIP"} {
		v, err := podField(pod, f)
		if err != nil {
			t.Fatalf("podField(%q): %v", f, err)
		}
		got = append(got, v)
	}
	want := []string{"p", "n", "u", "hello", "b", "node", "sa", "198.18.1.2", "198.18.0.1"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("fields (-want +got):\n%s", diff)
	}
	if _, err := podField(pod, "spec.unknown"); err == nil {
		t.Error("unknown field path accepted")
	}
}

// TestHostsFileNamesServices: the node's hosts file (for programs such as
// the KEDA operator) names every Service with a ClusterIP, rewritten in
// place so a bind mount of it follows.
func TestHostsFileNamesServices(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(path, []byte("127.0.0.1\tlocalhost\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	a := &Agent{cfg: Config{ClusterDomain: "cluster.local", HostsFile: path}, workers: map[types.UID]*podWorker{}}
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	for _, svc := range []*corev1.Service{
		{ObjectMeta: metav1.ObjectMeta{Name: "ebb-scaler", Namespace: "ebb-system"}, Spec: corev1.ServiceSpec{ClusterIP: "198.19.0.10"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "headless", Namespace: "ebb-system"}, Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone}},
	} {
		if err := store.Add(svc); err != nil {
			t.Fatal(err)
		}
	}
	a.servicesChanged(store)
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost\n" +
		"198.19.0.10\tebb-scaler.ebb-system.svc.cluster.local ebb-scaler.ebb-system.svc ebb-scaler.ebb-system\n"
	if diff := cmp.Diff(want, string(got)); diff != "" {
		t.Errorf("hosts file (-want +got):\n%s", diff)
	}
	after, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(before, after) {
		t.Error("the hosts file was replaced, not rewritten in place: a bind mount of it would not follow")
	}
}
