package inject

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// FuzzInject feeds Inject pods decoded from arbitrary JSON: it must never
// panic, must refuse only with a *RefusalError, must leave no kubelet probe
// or hook on the sidecar's data port, and injecting the result again must
// change nothing.
func FuzzInject(f *testing.F) {
	for _, p := range []*corev1.Pod{appPod(), injected(), appPod(func(p *corev1.Pod) { p.Spec.Containers[0].Ports = nil })} {
		b, err := json.Marshal(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"metadata":{"labels":{"ebb.dev/app":"a"},"annotations":{"ebb.dev/port":"x","ebb.dev/hosts":"*.a.b"}},"spec":{"containers":[{"name":"a","ports":[{"name":"x","containerPort":1}],"lifecycle":{"preStop":{"tcpSocket":{"port":"x"}}}},{"name":"b","ports":[{"containerPort":8012}]}]}}`))
	f.Add([]byte(`{"metadata":{"labels":{"ebb.dev/app":"a"}},"spec":{"initContainers":[{"name":"ebb-sidecar"}],"containers":[]}}`))
	f.Add([]byte(`{"metadata":{"labels":{"ebb.dev/app":"a"}},"spec":{"containers":[{"name":"a","ports":[{"containerPort":80}],"readinessProbe":{"httpGet":{"port":""}}}]}}`))
	f.Add([]byte(`{"metadata":{"labels":{"ebb.dev/app":"a"}},"spec":{"initContainers":[{"name":"i","startupProbe":{"grpc":{"port":8012}}}],"containers":[{"name":"a","ports":[{"containerPort":80}],"readinessProbe":{"tcpSocket":{"port":8012}},"livenessProbe":{"httpGet":{"host":"x","port":8012}}}]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var pod corev1.Pod
		if err := json.Unmarshal(data, &pod); err != nil {
			return
		}
		got, _, err := Inject(&pod, testCfg, Policy{})
		if err != nil {
			var refusal *RefusalError
			if !errors.As(err, &refusal) || len(refusal.Problems) == 0 {
				t.Fatalf("Inject error %v is not a RefusalError with problems", err)
			}
			return
		}
		if !HasSidecar(&pod.Spec) {
			for _, cs := range [][]corev1.Container{got.Spec.InitContainers, got.Spec.Containers} {
				for _, c := range cs {
					if c.Name != ContainerName && reachesPort(&c, testCfg.ListenPort) {
						t.Fatalf("container %q keeps a probe or hook on the sidecar's data port %d", c.Name, testCfg.ListenPort)
					}
				}
			}
		}
		again, _, err := Inject(got, testCfg, Policy{})
		if err != nil {
			t.Fatalf("second Inject refused the injected pod: %v", err)
		}
		if diff := cmp.Diff(got, again); diff != "" {
			t.Fatalf("second Inject changed the pod (-first +second):\n%s", diff)
		}
		if !HasSidecar(&got.Spec) {
			t.Fatalf("Inject succeeded without a sidecar")
		}
	})
}

// reachesPort reports whether a probe or lifecycle hook of c goes to port
// of the pod's own address by number (a name resolves among c's own ports,
// none of which may be the sidecar's).
func reachesPort(c *corev1.Container, port int32) bool {
	on := func(p intstr.IntOrString, host string) bool {
		return host == "" && p.Type == intstr.Int && p.IntVal == port
	}
	for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
		if p == nil {
			continue
		}
		if p.HTTPGet != nil && on(p.HTTPGet.Port, p.HTTPGet.Host) || p.TCPSocket != nil && on(p.TCPSocket.Port, p.TCPSocket.Host) || p.GRPC != nil && p.GRPC.Port == port {
			return true
		}
	}
	if c.Lifecycle != nil {
		for _, h := range []*corev1.LifecycleHandler{c.Lifecycle.PostStart, c.Lifecycle.PreStop} {
			if h != nil && (h.HTTPGet != nil && on(h.HTTPGet.Port, h.HTTPGet.Host) || h.TCPSocket != nil && on(h.TCPSocket.Port, h.TCPSocket.Host)) {
				return true
			}
		}
	}
	return false
}
