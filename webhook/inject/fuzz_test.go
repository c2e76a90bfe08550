package inject

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
)

// FuzzInject feeds Inject pods decoded from arbitrary JSON: it must never
// panic, must refuse only with a *RefusalError, and injecting the result
// again must change nothing.
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
	f.Fuzz(func(t *testing.T, data []byte) {
		var pod corev1.Pod
		if err := json.Unmarshal(data, &pod); err != nil {
			return
		}
		got, _, err := Inject(&pod, testCfg)
		if err != nil {
			var refusal *RefusalError
			if !errors.As(err, &refusal) || len(refusal.Problems) == 0 {
				t.Fatalf("Inject error %v is not a RefusalError with problems", err)
			}
			return
		}
		again, _, err := Inject(got, testCfg)
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
