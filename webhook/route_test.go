package webhook

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/webhook/inject"
)

func TestReach(t *testing.T) {
	cfg := inject.DefaultConfig(groupsuffix.MustNew(groupsuffix.Default), "test")
	named := inject.App{Port: 8080, PortName: "http"}
	unnamed := inject.App{Port: 8080}
	svc := func(ports ...corev1.ServicePort) *corev1.Service {
		s := &corev1.Service{Spec: corev1.ServiceSpec{Ports: ports}}
		s.Name = "web"
		return s
	}
	tests := []struct {
		name string
		svc  *corev1.Service
		app  inject.App
		want reachability
	}{{
		name: "targetPort by the app port's name",
		svc:  svc(corev1.ServicePort{Port: 80, TargetPort: intstr.FromString("http")}),
		app:  named,
		want: reachability{ok: true, port: 80, reason: "TargetsSidecar", message: "Service web port 80 targets the sidecar (http)"},
	}, {
		name: "targetPort by the sidecar's number",
		svc:  svc(corev1.ServicePort{Port: 80, TargetPort: intstr.FromInt32(8012)}),
		app:  named,
		want: reachability{ok: true, port: 80, reason: "TargetsSidecar", message: "Service web port 80 targets the sidecar (8012)"},
	}, {
		name: "targetPort by the app's number bypasses the sidecar",
		svc:  svc(corev1.ServicePort{Port: 80, TargetPort: intstr.FromInt32(8080)}),
		app:  named,
		want: reachability{port: 80, reason: "TargetsAppPortByNumber",
			message: "Service web port 80 targets the app's port 8080 by number, which bypasses the sidecar so requests are not counted; set targetPort: http"},
	}, {
		name: "no targetPort means the port number",
		svc:  svc(corev1.ServicePort{Port: 8080}),
		app:  unnamed,
		want: reachability{port: 8080, reason: "TargetsAppPortByNumber",
			message: "Service web port 8080 targets the app's port 8080 by number, which bypasses the sidecar so requests are not counted; set targetPort: http"},
	}, {
		name: "a reaching port wins over a bypassing one",
		svc:  svc(corev1.ServicePort{Port: 81, TargetPort: intstr.FromInt32(8080)}, corev1.ServicePort{Port: 80, TargetPort: intstr.FromString("http")}),
		app:  named,
		want: reachability{ok: true, port: 80, reason: "TargetsSidecar", message: "Service web port 80 targets the sidecar (http)"},
	}, {
		name: "unrelated ports",
		svc:  svc(corev1.ServicePort{Port: 9090, TargetPort: intstr.FromString("metrics")}, corev1.ServicePort{Port: 80, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromString("http")}),
		app:  named,
		want: reachability{reason: "NoPortToSidecar", message: `Service web has no TCP port targeting "http" or 8012`},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, reach(tc.svc, tc.app, cfg), cmp.AllowUnexported(reachability{})); diff != "" {
				t.Errorf("reach (-want +got):\n%s", diff)
			}
		})
	}
}

func TestInjectors(t *testing.T) {
	suffixes := func(ns []groupsuffix.Names) []string {
		var out []string
		for _, n := range ns {
			out = append(out, n.Suffix())
		}
		return out
	}
	tests := []struct {
		name      string
		ns, pod   map[string]string
		wantOrder []string
	}{
		{"one instance", map[string]string{"ebb.dev/inject": "enabled"}, map[string]string{"ebb.dev/app": "a"}, []string{"ebb.dev"}},
		{"in webhook configuration name order",
			map[string]string{"team1.example.com/inject": "enabled", "ebb.dev/inject": "enabled", "aaa.example.com/inject": "enabled"},
			map[string]string{"ebb.dev/app": "a", "team1.example.com/app": "a", "aaa.example.com/app": "a"},
			[]string{"aaa.example.com", "ebb.dev", "team1.example.com"}},
		{"the pod must carry the instance's app label, any value",
			map[string]string{"team1.example.com/inject": "enabled", "ebb.dev/inject": "enabled"},
			map[string]string{"team1.example.com/app": ""}, []string{"team1.example.com"}},
		{"the namespace label must say enabled",
			map[string]string{"team1.example.com/inject": "true", "ebb.dev/inject": "enabled"},
			map[string]string{"ebb.dev/app": "a", "team1.example.com/app": "a"}, []string{"ebb.dev"}},
		{"keys that are no group suffix are ignored",
			map[string]string{"inject": "enabled", "Bad_Suffix/inject": "enabled", "istio-injection": "enabled"},
			map[string]string{"app": "a", "Bad_Suffix/app": "a"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.wantOrder, suffixes(injectors(tc.ns, tc.pod))); diff != "" {
				t.Errorf("injectors (-want +got):\n%s", diff)
			}
		})
	}
}
