package webhook

import (
	"context"
	"encoding/json"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/ebb-dev/ebb/webhook/inject"
)

// apiServerPod is an app pod as the API server sends it to the webhook: a
// ReplicaSet's pod with defaults set and the service account token volume
// and tolerations added by the built-in admission plugins.
func apiServerPod() *corev1.Pod {
	tr, grace, prio := true, int64(30), int32(0)
	secs := int64(300)
	pod := barePod()
	pod.Name, pod.GenerateName = "", "hello-7d9c5b-"
	pod.Labels["pod-template-hash"] = "7d9c5b"
	pod.Labels["app.kubernetes.io/name"] = "hello"
	pod.Annotations = map[string]string{"ebb.dev/hosts": "hello.example.com", "kubectl.kubernetes.io/restartedAt": "2024-05-01T10:00:00Z"}
	pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "hello-7d9c5b", UID: "0b0c7c1e-8b7e-4c52-9d7a-2f1f0d6c1a11", Controller: &tr, BlockOwnerDeletion: &tr}}
	pod.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", FieldsType: "FieldsV1",
		FieldsV1: metav1.NewFieldsV1(`{"f:metadata":{"f:generateName":{},"f:labels":{".":{},"f:ebb.dev/app":{},"f:pod-template-hash":{}},"f:ownerReferences":{".":{},"k:{\"uid\":\"0b0c7c1e\"}":{}}},"f:spec":{"f:containers":{"k:{\"name\":\"app\"}":{".":{},"f:image":{},"f:name":{},"f:ports":{}}}}}`)}}
	c := &pod.Spec.Containers[0]
	c.Env = []corev1.EnvVar{{Name: "LOG_LEVEL", Value: "info"}, {Name: "GOMAXPROCS", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.cpu", Divisor: resource.MustParse("1")}}}}
	c.Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")}}
	c.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http"), Scheme: corev1.URISchemeHTTP}},
		TimeoutSeconds: 1, PeriodSeconds: 10, SuccessThreshold: 1, FailureThreshold: 3}
	c.LivenessProbe = c.ReadinessProbe.DeepCopy()
	c.Ports[0].Protocol = corev1.ProtocolTCP
	c.VolumeMounts = []corev1.VolumeMount{{Name: "kube-api-access-x7k2p", ReadOnly: true, MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"}}
	c.TerminationMessagePath, c.TerminationMessagePolicy, c.ImagePullPolicy = "/dev/termination-log", corev1.TerminationMessageReadFile, corev1.PullIfNotPresent
	pod.Spec.Volumes = []corev1.Volume{{Name: "kube-api-access-x7k2p", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
		{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{ExpirationSeconds: &[]int64{3607}[0], Path: "token"}},
		{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}, Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
		{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}}}},
	}, DefaultMode: &[]int32{420}[0]}}}}
	pod.Spec.RestartPolicy, pod.Spec.DNSPolicy, pod.Spec.SchedulerName = corev1.RestartPolicyAlways, corev1.DNSClusterFirst, corev1.DefaultSchedulerName
	pod.Spec.TerminationGracePeriodSeconds, pod.Spec.Priority, pod.Spec.EnableServiceLinks = &grace, &prio, &tr
	pod.Spec.ServiceAccountName, pod.Spec.SecurityContext = "default", &corev1.PodSecurityContext{}
	pod.Spec.Tolerations = []corev1.Toleration{
		{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &secs},
		{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &secs},
	}
	return pod
}

// TestPatch checks that the patch the handler answers with, computed on
// the fields Inject changes, turns the pod the API server sent into exactly
// the injected pod, and leaves fields this build does not know alone.
func TestPatch(t *testing.T) {
	h := newInjector()
	withInit := apiServerPod()
	withInit.Spec.InitContainers = []corev1.Container{{Name: "migrate", Image: "migrate:1"}}
	noAnnotations := barePod()
	noAnnotations.Annotations = nil
	unnamedPort := barePod()
	unnamedPort.Spec.Containers[0].Ports[0].Name = ""
	twoContainers := apiServerPod()
	twoContainers.Spec.Containers = append([]corev1.Container{{Name: "logger", Image: "logger:1"}}, twoContainers.Spec.Containers...)
	for name, pod := range map[string]*corev1.Pod{
		"bare pod": barePod(), "API server's pod": apiServerPod(), "with an init container": withInit,
		"no annotations": noAnnotations, "unnamed port": unnamedPort, "app is the second container": twoContainers,
	} {
		t.Run(name, func(t *testing.T) {
			want, _, err := inject.Inject(pod, h.cfg, inject.Policy{})
			if err != nil {
				t.Fatal(err)
			}
			req := podRequest(t, pod, false)
			got := applyResponse(t, h, req.Object.Raw, req)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("patched pod differs from the injected pod (-want +got):\n%s", diff)
			}
		})
	}

	t.Run("unknown fields survive", func(t *testing.T) {
		var raw map[string]any
		req := podRequest(t, apiServerPod(), false)
		if err := json.Unmarshal(req.Object.Raw, &raw); err != nil {
			t.Fatal(err)
		}
		raw["spec"].(map[string]any)["futureField"] = map[string]any{"on": true}
		raw["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)["futureField"] = "kept"
		raw["metadata"].(map[string]any)["futureField"] = "kept"
		b, err := json.Marshal(raw)
		if err != nil {
			t.Fatal(err)
		}
		req.Object.Raw = b
		resp := h.Handle(context.Background(), req)
		patched := applyPatch(t, b, resp.Patches)
		var out map[string]any
		if err := json.Unmarshal(patched, &out); err != nil {
			t.Fatal(err)
		}
		spec := out["spec"].(map[string]any)
		got := []any{spec["futureField"], spec["containers"].([]any)[0].(map[string]any)["futureField"], out["metadata"].(map[string]any)["futureField"]}
		if diff := cmp.Diff([]any{map[string]any{"on": true}, "kept", "kept"}, got); diff != "" {
			t.Errorf("unknown fields of spec, the app container and metadata after the patch (-want +got):\n%s", diff)
		}
		if len(spec["initContainers"].([]any)) != 1 {
			t.Errorf("patched pod has init containers %v, want the sidecar", spec["initContainers"])
		}
	})
}

func applyResponse(t *testing.T, h *podInjector, raw []byte, req admission.Request) *corev1.Pod {
	t.Helper()
	resp := h.Handle(context.Background(), req)
	if !resp.Allowed {
		t.Fatalf("refused: %v", resp.Result)
	}
	var pod corev1.Pod
	if err := json.Unmarshal(applyPatch(t, raw, resp.Patches), &pod); err != nil {
		t.Fatal(err)
	}
	return &pod
}

func applyPatch(t *testing.T, raw []byte, ops any) []byte {
	t.Helper()
	b, err := json.Marshal(ops)
	if err != nil {
		t.Fatal(err)
	}
	p, err := jsonpatch.DecodePatch(b)
	if err != nil {
		t.Fatalf("decode patch %s: %v", b, err)
	}
	out, err := p.Apply(raw)
	if err != nil {
		t.Fatalf("apply patch %s: %v", b, err)
	}
	return out
}

// BenchmarkHandleAPIServerPod is BenchmarkHandleBarePod with a pod as the
// API server sends it.
func BenchmarkHandleAPIServerPod(b *testing.B) {
	h := newInjector()
	req := podRequest(b, apiServerPod(), true)
	b.ReportAllocs()
	for b.Loop() {
		if resp := h.Handle(context.Background(), req); !resp.Allowed {
			b.Fatal(resp.Result.Message)
		}
	}
}
