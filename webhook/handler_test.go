package webhook

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/webhook/inject"
)

func podRequest(tb testing.TB, pod *corev1.Pod, dryRun bool) admission.Request {
	tb.Helper()
	raw, err := json.Marshal(pod)
	if err != nil {
		tb.Fatal(err)
	}
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID: "1", Operation: admissionv1.Create, Namespace: "shop", DryRun: &dryRun,
		Kind:   metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Object: runtime.RawExtension{Raw: raw},
	}}
}

func barePod() *corev1.Pod {
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: "shop", Labels: map[string]string{"ebb.dev/app": "hello"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "app", Image: "hello:1", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
		}}},
	}
}

func newInjector() *podInjector {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	return &podInjector{cfg: inject.DefaultConfig(groupsuffix.MustNew(groupsuffix.Default), "test"), decoder: admission.NewDecoder(scheme),
		customGroups: groupsOf([]schema.GroupResource{{Group: "example.com", Resource: "workers"}})}
}

// TestHandleAnswers checks the admission answers a user sees. The handler
// has no client: it makes no API call and writes nothing, dry run or not.
func TestHandleAnswers(t *testing.T) {
	h := newInjector()
	owned := apiServerPod() // a ReplicaSet's: the AppRoute controller routes its Deployment
	bad := barePod()
	bad.Annotations = map[string]string{"ebb.dev/hosts": "Bad_Host"}
	controlledBy := func(apiVersion, kind string) *corev1.Pod {
		p, tr := barePod(), true
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: "hello", UID: "u", Controller: &tr}}
		return p
	}
	const notRouted = "no Deployment, StatefulSet or --scale-targets kind manages this pod, so ebb registers no AppRoute for it"
	tests := []struct {
		name string
		req  admission.Request
		want []any // allowed, code, patch ops > 0, warnings
	}{
		{"injects, warns that no route is registered", podRequest(t, barePod(), false),
			[]any{true, int32(200), true, []string{notRouted}}},
		// StatefulSets and the listed kinds are routed: their pods got the
		// warning too until the webhook learnt the kinds (the e2e run of
		// TestStatefulSetApp and TestCustomScaleTarget printed it).
		{"a StatefulSet's pod: injects, no warning", podRequest(t, controlledBy("apps/v1", "StatefulSet"), false),
			[]any{true, int32(200), true, []string(nil)}},
		{"a listed kind's pod: injects, no warning", podRequest(t, controlledBy("example.com/v1", "Worker"), false),
			[]any{true, int32(200), true, []string(nil)}},
		{"a Job's pod: injects, warns", podRequest(t, controlledBy("batch/v1", "Job"), false),
			[]any{true, int32(200), true, []string{notRouted}}},
		{"a DaemonSet's pod: injects, warns", podRequest(t, controlledBy("apps/v1", "DaemonSet"), false),
			[]any{true, int32(200), true, []string{notRouted}}},
		{"dry run: injects, registers nothing, no warning", podRequest(t, barePod(), true),
			[]any{true, int32(200), true, []string(nil)}},
		{"a ReplicaSet's pod: injects, no warning", podRequest(t, owned, false),
			[]any{true, int32(200), true, []string(nil)}},
		{"refuses a bad annotation", podRequest(t, bad, false),
			[]any{false, int32(403), false, []string(nil)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp := h.Handle(context.Background(), tc.req)
			code, msg := int32(200), ""
			if resp.Result != nil {
				code, msg = resp.Result.Code, resp.Result.Message
			}
			got := []any{resp.Allowed, code, len(resp.Patches) > 0, resp.Warnings}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("response (-want +got):\n%s\nmessage: %s", diff, msg)
			}
		})
	}
}

// BenchmarkHandleBarePod measures the webhook's own work per admission:
// decode, inject, encode, compute the JSON patch.
func BenchmarkHandleBarePod(b *testing.B) {
	h := newInjector()
	req := podRequest(b, barePod(), true)
	b.ReportAllocs()
	for b.Loop() {
		if resp := h.Handle(context.Background(), req); !resp.Allowed {
			b.Fatal(resp.Result.Message)
		}
	}
}
