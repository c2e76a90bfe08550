package inject

import (
	"errors"
	"strings"
	"testing"
	"time"

	ebbsidecar "github.com/ebb-dev/ebb/sidecar"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/webhook/inject/injecttest"
)

var testCfg = DefaultConfig(groupsuffix.MustNew(groupsuffix.Default), "v1.2.3")

// appPod is a minimal opted-in pod: one container with one named port and a
// readiness probe on that name.
func appPod(mods ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "hello-1", Namespace: "shop",
			Labels:      map[string]string{"ebb.dev/app": "hello"},
			Annotations: map[string]string{"ebb.dev/hosts": "hello.example.com"},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name:  "app",
			Image: "hello:1",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
				HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http")},
			}},
		}}},
	}
	for _, m := range mods {
		m(p)
	}
	return p
}

// wantSidecar is the sidecar Inject adds to appPod.
func wantSidecar(mods ...func(*corev1.Container)) corev1.Container {
	always := corev1.ContainerRestartPolicyAlways
	c := corev1.Container{
		Name:            "ebb-sidecar",
		Image:           "ghcr.io/ebb-dev/ebb-sidecar:v1.2.3",
		ImagePullPolicy: corev1.PullIfNotPresent,
		RestartPolicy:   &always,
		Ports: []corev1.ContainerPort{
			{Name: "http", ContainerPort: 8012, Protocol: corev1.ProtocolTCP},
			{Name: "ebb-admin", ContainerPort: 8022, Protocol: corev1.ProtocolTCP},
		},
		Env: []corev1.EnvVar{
			{Name: "EBB_LISTEN", Value: ":8012"},
			{Name: "EBB_UPSTREAM", Value: "127.0.0.1:8080"},
			{Name: "EBB_ADMIN_LISTEN", Value: ":8022"},
			{Name: "EBB_DRAIN_TIMEOUT", Value: "20s"},
			{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}}},
			{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}},
			{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "status.podIP"}}},
			{Name: "EBB_INSTANCE", Value: testCfg.Names.Suffix()},
		},
		Resources: testCfg.Resources,
		ReadinessProbe: &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: "/ready", Port: intstr.FromString("ebb-admin"), Scheme: corev1.URISchemeHTTP,
			}},
			PeriodSeconds: 1, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 3,
		},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		SecurityContext:          RestrictedSecurityContext(),
	}
	for _, m := range mods {
		m(&c)
	}
	return c
}

// injected is appPod after Inject, modified by mods.
func injected(mods ...func(*corev1.Pod)) *corev1.Pod {
	p := appPod()
	p.Annotations["ebb.dev/sidecar"] = "ghcr.io/ebb-dev/ebb-sidecar:v1.2.3"
	p.Spec.Containers[0].Ports[0].Name = "ebb-app"
	p.Spec.Containers[0].ReadinessProbe.HTTPGet.Port = intstr.FromInt32(8080)
	// The app's readiness probe, handed to the sidecar.
	p.Spec.InitContainers = []corev1.Container{wantSidecar(withAppReadiness(`{"http":{"port":8080,"path":"/healthz"}}`))}
	p.Spec.Containers[0].Lifecycle = wantPreStop(8022)
	for _, m := range mods {
		m(p)
	}
	return p
}

// withAppReadiness adds the app's readiness check to the sidecar's env
// (none with an empty check).
func withAppReadiness(check string) func(*corev1.Container) {
	return func(c *corev1.Container) {
		if check != "" {
			c.Env = append(c.Env, corev1.EnvVar{Name: "EBB_APP_READINESS", Value: check})
		}
	}
}

// wantPreStop is the hook Inject gives the app container.
func wantPreStop(adminPort int32) *corev1.Lifecycle {
	return &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{
		Path: "/wait-for-drain", Port: intstr.FromInt32(adminPort), Scheme: corev1.URISchemeHTTP,
	}}}
}

func TestInject(t *testing.T) {
	tests := []struct {
		name         string
		pod          *corev1.Pod
		cfg          func(*Config)
		want         *corev1.Pod
		wantWarnings []string
	}{{
		name: "named port and probe on it",
		pod:  appPod(),
		want: injected(),
	}, {
		name: "port annotation by number picks the port among several",
		pod: appPod(func(p *corev1.Pod) {
			p.Annotations["ebb.dev/port"] = "8080"
			p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports, corev1.ContainerPort{Name: "metrics", ContainerPort: 9090})
		}),
		want: injected(func(p *corev1.Pod) {
			p.Annotations["ebb.dev/port"] = "8080"
			p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports, corev1.ContainerPort{Name: "metrics", ContainerPort: 9090})
		}),
	}, {
		name: "port annotation by name in the second container",
		pod: appPod(func(p *corev1.Pod) {
			p.Annotations["ebb.dev/port"] = "web"
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "web", Ports: []corev1.ContainerPort{{Name: "web", ContainerPort: 3000}},
				LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("web")}}}})
		}),
		want: func() *corev1.Pod {
			p := appPod(func(p *corev1.Pod) {
				p.Annotations["ebb.dev/port"] = "web"
				p.Annotations["ebb.dev/sidecar"] = "ghcr.io/ebb-dev/ebb-sidecar:v1.2.3"
				p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "web", Ports: []corev1.ContainerPort{{Name: "ebb-app", ContainerPort: 3000}},
					LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(3000)}}},
					Lifecycle:     wantPreStop(8022)})
				p.Spec.InitContainers = []corev1.Container{wantSidecar(func(c *corev1.Container) {
					c.Ports[0].Name = "web"
					c.Env[1].Value = "127.0.0.1:3000"
				})}
			})
			return p
		}(),
	}, {
		name: "probes by number, exec probes and lifecycle hooks",
		pod: appPod(func(p *corev1.Pod) {
			c := &p.Spec.Containers[0]
			c.LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(8080)}}}
			c.StartupProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}
			c.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/quit", Port: intstr.FromString("http")}}}
		}),
		want: injected(func(p *corev1.Pod) {
			c := &p.Spec.Containers[0]
			c.LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(8080)}}}
			c.StartupProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}
			c.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/quit", Port: intstr.FromInt32(8080)}}}
		}),
		wantWarnings: []string{`container "app" has its own preStop hook, so ebb does not add its own (GET /wait-for-drain on port 8022, which keeps the pod serving until traffic has moved away): requests may fail while the app scales down unless your hook calls it or waits a few seconds`},
	}, {
		// A probe on the sidecar's data port by number would be counted (and
		// keep the app from zero): every one the kubelet runs in the pod's
		// network goes to the app's port, whatever its kind.
		name: "probes and hooks on the sidecar's port number go to the app's port",
		pod: appPod(func(p *corev1.Pod) {
			c := &p.Spec.Containers[0]
			c.ReadinessProbe.HTTPGet.Port = intstr.FromInt32(8012)
			c.LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 8012}}}
			c.StartupProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8012)}}}
			c.Lifecycle = &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/warm", Port: intstr.FromInt32(8012)}}}
		}),
		want: injected(func(p *corev1.Pod) {
			c := &p.Spec.Containers[0]
			c.LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 8080}}}
			c.StartupProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}}}
			c.Lifecycle.PostStart = &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/warm", Port: intstr.FromInt32(8080)}}
		}),
	}, {
		name: "unnamed app port: probes on the sidecar's port number go to the app's port",
		pod: appPod(func(p *corev1.Pod) {
			c := &p.Spec.Containers[0]
			c.Ports[0].Name = ""
			c.ReadinessProbe.HTTPGet.Port = intstr.FromInt32(8012)
			c.LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 8012}}}
		}),
		want: injected(func(p *corev1.Pod) {
			c := &p.Spec.Containers[0]
			c.Ports[0].Name = ""
			c.LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 8080}}}
		}),
		wantWarnings: []string{"the app port 8080 has no name: a Service reaches the sidecar only with targetPort: http (a targetPort by number bypasses it and ebb cannot count requests)"},
	}, {
		name: "other containers' probes on the sidecar's port number go to the app's port too",
		pod: appPod(func(p *corev1.Pod) {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "cache",
				LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(8012)}}}})
			p.Spec.InitContainers = []corev1.Container{{Name: "proxy", RestartPolicy: ptrTo(corev1.ContainerRestartPolicyAlways),
				StartupProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 8012}}}}}
		}),
		want: injected(func(p *corev1.Pod) {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "cache",
				LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(8080)}}}})
			p.Spec.InitContainers = append([]corev1.Container{{Name: "proxy", RestartPolicy: ptrTo(corev1.ContainerRestartPolicyAlways),
				StartupProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 8080}}}}}, p.Spec.InitContainers...)
		}),
	}, {
		name: "a probe of another host, or of a port that is not the sidecar's, is left alone",
		pod: appPod(func(p *corev1.Pod) {
			c := &p.Spec.Containers[0]
			c.LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Host: "upstream.example.com", Port: intstr.FromInt32(8012)}}}
			c.StartupProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8022)}}}
		}),
		want: injected(func(p *corev1.Pod) {
			c := &p.Spec.Containers[0]
			c.LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Host: "upstream.example.com", Port: intstr.FromInt32(8012)}}}
			c.StartupProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8022)}}}
		}),
	}, {
		name: "probes follow a configured sidecar port",
		pod: appPod(func(p *corev1.Pod) {
			c := &p.Spec.Containers[0]
			c.LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(9012)}}}
			c.StartupProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8012)}}}
		}),
		cfg: func(c *Config) { c.ListenPort = 9012 },
		want: injected(func(p *corev1.Pod) {
			c := &p.Spec.Containers[0]
			c.LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}}}
			c.StartupProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8012)}}}
			s := &p.Spec.InitContainers[0]
			s.Ports[0].ContainerPort, s.Env[0].Value = 9012, ":9012"
		}),
	}, {
		name: "unnamed port: sidecar port named http, with a warning",
		pod: appPod(func(p *corev1.Pod) {
			p.Spec.Containers[0].Ports[0].Name = ""
			p.Spec.Containers[0].ReadinessProbe = nil
		}),
		want: injected(func(p *corev1.Pod) {
			p.Spec.Containers[0].Ports[0].Name = ""
			p.Spec.Containers[0].ReadinessProbe = nil
			p.Spec.InitContainers = []corev1.Container{wantSidecar()}
		}),
		wantWarnings: []string{"the app port 8080 has no name: a Service reaches the sidecar only with targetPort: http (a targetPort by number bypasses it and ebb cannot count requests)"},
	}, {
		name: "existing init containers run first, pod security context kept",
		pod: appPod(func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "migrate", Image: "migrate:1"}}
			root := int64(0)
			p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: &root}
		}),
		want: injected(func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "migrate", Image: "migrate:1"}, wantSidecar(withAppReadiness(`{"http":{"port":8080,"path":"/healthz"}}`))}
			root := int64(0)
			p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: &root}
		}),
	}, {
		name: "drain timeout annotation and a short grace period",
		pod: appPod(func(p *corev1.Pod) {
			p.Annotations["ebb.dev/drain-timeout"] = "45s"
			g := int64(30)
			p.Spec.TerminationGracePeriodSeconds = &g
		}),
		want: injected(func(p *corev1.Pod) {
			p.Annotations["ebb.dev/drain-timeout"] = "45s"
			g := int64(30)
			p.Spec.TerminationGracePeriodSeconds = &g
			p.Spec.InitContainers[0].Env[3].Value = "45s"
		}),
		wantWarnings: []string{"terminationGracePeriodSeconds (30s) is not longer than the sidecar's drain timeout (45s): requests may be cut off on shutdown"},
	}, {
		name: "drain timeout annotation 0s means no drain, not the default",
		pod: appPod(func(p *corev1.Pod) {
			p.Annotations["ebb.dev/drain-timeout"] = "0s"
		}),
		want: injected(func(p *corev1.Pod) {
			p.Annotations["ebb.dev/drain-timeout"] = "0s"
			p.Spec.InitContainers[0].Env[3].Value = "0s"
		}),
	}, {
		name: "readiness probes the sidecar runs: tcpSocket on a named port, with its timing",
		pod: appPod(func(p *corev1.Pod) {
			p.Spec.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("http")}},
				TimeoutSeconds: 2, PeriodSeconds: 5, SuccessThreshold: 2, FailureThreshold: 4}
		}),
		want: injected(func(p *corev1.Pod) {
			p.Spec.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}},
				TimeoutSeconds: 2, PeriodSeconds: 5, SuccessThreshold: 2, FailureThreshold: 4}
			p.Spec.InitContainers = []corev1.Container{wantSidecar(withAppReadiness(`{"tcp":{"port":8080},"timeoutSeconds":2,"periodSeconds":5,"successThreshold":2,"failureThreshold":4}`))}
		}),
	}, {
		name: "readiness probe on another port, HTTPS, with headers",
		pod: appPod(func(p *corev1.Pod) {
			c := &p.Spec.Containers[0]
			c.Ports = append(c.Ports, corev1.ContainerPort{Name: "admin", ContainerPort: 9090, Protocol: corev1.ProtocolTCP})
			c.ReadinessProbe.HTTPGet = &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromString("admin"), Scheme: corev1.URISchemeHTTPS,
				HTTPHeaders: []corev1.HTTPHeader{{Name: "X-Probe", Value: "1"}}}
			p.Annotations["ebb.dev/port"] = "http"
		}),
		want: injected(func(p *corev1.Pod) {
			c := &p.Spec.Containers[0]
			c.Ports = append(c.Ports, corev1.ContainerPort{Name: "admin", ContainerPort: 9090, Protocol: corev1.ProtocolTCP})
			c.ReadinessProbe.HTTPGet = &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromString("admin"), Scheme: corev1.URISchemeHTTPS,
				HTTPHeaders: []corev1.HTTPHeader{{Name: "X-Probe", Value: "1"}}}
			p.Annotations["ebb.dev/port"] = "http"
			p.Spec.InitContainers = []corev1.Container{wantSidecar(withAppReadiness(`{"http":{"scheme":"HTTPS","port":9090,"path":"/ready","headers":[{"name":"X-Probe","value":"1"}]}}`))}
		}),
	}, {
		name: "exec readiness probe: not run by the sidecar, with a warning",
		pod: appPod(func(p *corev1.Pod) {
			p.Spec.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"ready"}}}}
		}),
		want: injected(func(p *corev1.Pod) {
			p.Spec.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"ready"}}}}
			p.Spec.InitContainers = []corev1.Container{wantSidecar()}
		}),
		wantWarnings: []string{`container "app" has an exec readiness probe, which ebb's sidecar cannot run: a request held while the app is at zero is released as soon as the app's port accepts connections, possibly before this probe passes; an httpGet or tcpSocket readiness probe is honoured`},
	}, {
		name: "response header timeout annotation",
		pod: appPod(func(p *corev1.Pod) {
			p.Annotations["ebb.dev/response-header-timeout"] = "90s"
		}),
		want: injected(func(p *corev1.Pod) {
			p.Annotations["ebb.dev/response-header-timeout"] = "90s"
			p.Spec.InitContainers[0].Env = append(p.Spec.InitContainers[0].Env, corev1.EnvVar{Name: "EBB_RESPONSE_HEADER_TIMEOUT", Value: "1m30s"})
		}),
	}, {
		name: "route controls: request and stream idle timeouts, concurrency and its queue",
		pod: appPod(func(p *corev1.Pod) {
			p.Annotations["ebb.dev/request-timeout"] = "5m"
			p.Annotations["ebb.dev/stream-idle-timeout"] = "90s"
			p.Annotations["ebb.dev/concurrency"] = "1"
			p.Annotations["ebb.dev/concurrency-queue"] = "50"
			p.Annotations["ebb.dev/fallback"] = "hello-static:8080"
		}),
		want: injected(func(p *corev1.Pod) {
			p.Annotations["ebb.dev/request-timeout"] = "5m"
			p.Annotations["ebb.dev/stream-idle-timeout"] = "90s"
			p.Annotations["ebb.dev/concurrency"] = "1"
			p.Annotations["ebb.dev/concurrency-queue"] = "50"
			p.Annotations["ebb.dev/fallback"] = "hello-static:8080"
			p.Spec.InitContainers[0].Env = append(p.Spec.InitContainers[0].Env,
				corev1.EnvVar{Name: "EBB_REQUEST_TIMEOUT", Value: "5m0s"}, corev1.EnvVar{Name: "EBB_STREAM_IDLE_TIMEOUT", Value: "1m30s"},
				corev1.EnvVar{Name: "EBB_CONCURRENCY", Value: "1"}, corev1.EnvVar{Name: "EBB_CONCURRENCY_QUEUE", Value: "50"})
		}),
	}, {
		name: "concurrency 0 is set: no limit, said to the sidecar",
		pod: appPod(func(p *corev1.Pod) {
			p.Annotations["ebb.dev/concurrency"] = "0"
		}),
		want: injected(func(p *corev1.Pod) {
			p.Annotations["ebb.dev/concurrency"] = "0"
			p.Spec.InitContainers[0].Env = append(p.Spec.InitContainers[0].Env, corev1.EnvVar{Name: "EBB_CONCURRENCY", Value: "0"})
		}),
	}, {
		name: "configured image, ports and suffix",
		pod: appPod(func(p *corev1.Pod) {
			p.Labels = map[string]string{"team1.example.com/app": "hello"}
			p.Annotations = nil
		}),
		cfg: func(c *Config) {
			c.Names = groupsuffix.MustNew("team1.example.com")
			c.Image = "registry.local/ebb-sidecar:dev"
			c.ListenPort, c.AdminPort = 9012, 9022
			c.DrainTimeout = 5 * time.Second
		},
		want: injected(func(p *corev1.Pod) {
			p.Labels = map[string]string{"team1.example.com/app": "hello"}
			p.Annotations = map[string]string{"team1.example.com/sidecar": "registry.local/ebb-sidecar:dev"}
			s := &p.Spec.InitContainers[0]
			s.Image = "registry.local/ebb-sidecar:dev"
			s.Ports[0].ContainerPort, s.Ports[1].ContainerPort = 9012, 9022
			s.Env[0].Value, s.Env[2].Value, s.Env[3].Value, s.Env[7].Value = ":9012", ":9022", "5s", "team1.example.com"
			p.Spec.Containers[0].Lifecycle = wantPreStop(9022)
		}),
	}, {
		name: "sidecar of this instance: unchanged, silent",
		pod:  injected(),
		want: injected(),
	}, {
		name: "sidecar of another instance: unchanged, warned",
		pod: injected(func(p *corev1.Pod) {
			delete(p.Annotations, "ebb.dev/sidecar")
			p.Annotations["team1.example.com/sidecar"] = "x"
		}),
		want: injected(func(p *corev1.Pod) {
			delete(p.Annotations, "ebb.dev/sidecar")
			p.Annotations["team1.example.com/sidecar"] = "x"
		}),
		wantWarnings: []string{`pod already has a container named "ebb-sidecar" (from another ebb instance?); ebb.dev leaves it alone and registers no route`},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testCfg
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			before := tc.pod.DeepCopy()
			got, warnings, err := Inject(tc.pod, cfg, Policy{})
			if err != nil {
				t.Fatalf("Inject: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("pod (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantWarnings, warnings); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(before, tc.pod); diff != "" {
				t.Errorf("Inject modified its input (-before +after):\n%s", diff)
			}
			again, warnings2, err := Inject(got, cfg, Policy{})
			if err != nil {
				t.Fatalf("second Inject: %v", err)
			}
			if diff := cmp.Diff(got, again); diff != "" {
				t.Errorf("second Inject changed the pod (-first +second):\n%s", diff)
			}
			if tc.wantWarnings == nil && warnings2 != nil {
				t.Errorf("second Inject warned: %q", warnings2)
			}
		})
	}
}

func ptrTo[T any](v T) *T { return &v }

func TestInjectRefuses(t *testing.T) {
	tests := []struct {
		name string
		pod  *corev1.Pod
		want []string // each must appear in the message
	}{{
		name: "bad host",
		pod:  appPod(func(p *corev1.Pod) { p.Annotations["ebb.dev/hosts"] = "ok.example.com, Bad_Host" }),
		want: []string{`annotation ebb.dev/hosts="ok.example.com, Bad_Host": host "Bad_Host" is not a lowercase DNS name; fix: list lowercase DNS names`},
	}, {
		name: "wildcard in the middle and top-level wildcard",
		pod:  appPod(func(p *corev1.Pod) { p.Annotations["ebb.dev/hosts"] = "a.*.example.com,*.com" }),
		want: []string{`host "a.*.example.com": only a leading "*." wildcard is allowed`, `wildcard "*.com" covers a whole top-level domain`},
	}, {
		name: "unknown port",
		pod:  appPod(func(p *corev1.Pod) { p.Annotations["ebb.dev/port"] = "grpc" }),
		want: []string{`annotation ebb.dev/port="grpc": no container of the pod declares this port; fix: add it to the app container's ports, or set the annotation to one of http (8080 in app)`},
	}, {
		name: "several ports, no annotation",
		pod: appPod(func(p *corev1.Pod) {
			p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports, corev1.ContainerPort{ContainerPort: 9090})
		}),
		want: []string{`annotation ebb.dev/port: the pod declares 2 container ports (http (8080 in app), 9090 (in app)), so ebb cannot tell the app's; fix: set ebb.dev/port to the app's port name or number`},
	}, {
		name: "no port at all",
		pod:  appPod(func(p *corev1.Pod) { p.Spec.Containers[0].Ports = nil }),
		want: []string{`the pod declares no container port and the annotation is not set`},
	}, {
		name: "port conflicting with the sidecar",
		pod:  appPod(func(p *corev1.Pod) { p.Spec.Containers[0].Ports[0].ContainerPort = 8022 }),
		want: []string{`container "app" declares port 8022, which the ebb sidecar listens on; fix: move the container off ports 8012 and 8022`},
	}, {
		name: "UDP app port",
		pod:  appPod(func(p *corev1.Pod) { p.Spec.Containers[0].Ports[0].Protocol = corev1.ProtocolUDP }),
		want: []string{`the app port 8080 is UDP; the sidecar proxies TCP (HTTP) only`},
	}, {
		name: "bad app name, paths, timeouts and queue size all reported at once",
		pod: appPod(func(p *corev1.Pod) {
			p.Labels["ebb.dev/app"] = "Hello"
			p.Annotations["ebb.dev/paths"] = "api"
			p.Annotations["ebb.dev/queue-size"] = "-1"
			p.Annotations["ebb.dev/cold-start-timeout"] = "forever"
			p.Annotations["ebb.dev/drain-timeout"] = "1h"
			p.Annotations["ebb.dev/response-header-timeout"] = "0s"
			p.Annotations["ebb.dev/service"] = "Web_Svc"
			p.Annotations["ebb.dev/placeholder"] = "yes"
		}),
		want: []string{`label ebb.dev/app="Hello"`, `annotation ebb.dev/paths="api"`, `annotation ebb.dev/queue-size="-1"`,
			`annotation ebb.dev/cold-start-timeout="forever"`, `annotation ebb.dev/drain-timeout="1h"`, `annotation ebb.dev/response-header-timeout="0s"`, `annotation ebb.dev/service="Web_Svc"`,
			`annotation ebb.dev/placeholder="yes": not true or false`},
	}, {
		name: "bad route controls all reported at once",
		pod: appPod(func(p *corev1.Pod) {
			p.Annotations["ebb.dev/request-timeout"] = "25h"
			p.Annotations["ebb.dev/stream-idle-timeout"] = "0s"
			p.Annotations["ebb.dev/concurrency"] = "10001"
			p.Annotations["ebb.dev/concurrency-queue"] = "-1"
			p.Annotations["ebb.dev/fallback"] = "Static_Site:80"
		}),
		want: []string{`annotation ebb.dev/request-timeout="25h": not a duration above 0s and at most 24h0m0s; fix: set a Go duration`,
			`annotation ebb.dev/stream-idle-timeout="0s": not a duration above 0s and at most 24h0m0s; fix:`,
			`annotation ebb.dev/concurrency="10001": not a whole number from 0 to 10000; fix:`,
			`annotation ebb.dev/concurrency-queue="-1": not a whole number from 0 to 100000; fix:`,
			`annotation ebb.dev/fallback="Static_Site:80": not a Service name`, `fix: name another Service of the namespace`},
	}, {
		name: "a concurrency queue without a limit",
		pod: appPod(func(p *corev1.Pod) {
			p.Annotations["ebb.dev/concurrency-queue"] = "10"
		}),
		want: []string{`annotation ebb.dev/concurrency-queue="10": a queue without a concurrency limit`, `fix: set ebb.dev/concurrency above 0 too`},
	}, {
		name: "a fallback port that is not a number",
		pod: appPod(func(p *corev1.Pod) {
			p.Annotations["ebb.dev/fallback"] = "static:http"
		}),
		want: []string{`annotation ebb.dev/fallback="static:http": port "http" is not a port number (1-65535)`},
	}, {
		name: "the fallback is the app's own Service",
		pod: appPod(func(p *corev1.Pod) {
			p.Annotations["ebb.dev/service"] = "hello"
			p.Annotations["ebb.dev/fallback"] = "hello"
		}),
		want: []string{`annotation ebb.dev/fallback="hello": the app's own Service (ebb.dev/service)`},
	}, {
		name: "bad route labels",
		pod: appPod(func(p *corev1.Pod) {
			p.Annotations["ebb.dev/route-labels"] = "tier=gold,tier=silver,bad key=x,team=a b,ebb.dev/pool=a,lonely"
		}),
		want: []string{`annotation ebb.dev/route-labels=`, `"tier" is given twice`, `"bad key" is not a label key`, `"a b" is not a label value`,
			`"ebb.dev/pool" is under ebb.dev/, which ebb sets itself`, `"lonely" is not key=value`, `fix: list up to 16 labels as key=value`},
	}, {
		name: "host network",
		pod:  appPod(func(p *corev1.Pod) { p.Spec.HostNetwork = true }),
		want: []string{`the pod uses hostNetwork`},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, _, err := Inject(tc.pod, testCfg, Policy{})
			var refusal *RefusalError
			if !errors.As(err, &refusal) {
				t.Fatalf("Inject = %v, %v; want a *RefusalError", got, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("message %q\nlacks %q", err.Error(), w)
				}
			}
		})
	}
}

func TestParseApp(t *testing.T) {
	p := appPod(func(p *corev1.Pod) {
		p.Annotations["ebb.dev/hosts"] = " hello.example.com ,*.hello.example.com,hello.example.com,"
		p.Annotations["ebb.dev/paths"] = "/api, /static"
		p.Annotations["ebb.dev/queue-size"] = "500"
		p.Annotations["ebb.dev/cold-start-timeout"] = "90s"
		p.Annotations["ebb.dev/service"] = "hello"
		p.Annotations["ebb.dev/placeholder"] = "true"
		p.Annotations["ebb.dev/route-labels"] = " team=payments, example.com/tier=gold ,"
		p.Annotations["ebb.dev/fallback"] = " hello-static "
		p.Annotations["ebb.dev/concurrency"] = "4"
	})
	got, err := ParseApp(p.Namespace, &p.ObjectMeta, &p.Spec, testCfg)
	if err != nil {
		t.Fatal(err)
	}
	want := App{Name: "hello", Hosts: []string{"hello.example.com", "*.hello.example.com"}, PathPrefixes: []string{"/api", "/static"},
		Container: "app", Port: 8080, PortName: "http", Service: "hello", QueueSize: 500, ColdStartTimeout: 90 * time.Second, Placeholder: true,
		RouteLabels: map[string]string{"team": "payments", "example.com/tier": "gold"}, Fallback: "hello-static", Concurrency: 4, ConcurrencySet: true}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ParseApp (-want +got):\n%s", diff)
	}
}

// TestInjectObservability: the sidecar gets the instance's request-metrics
// and tracing settings as environment variables its own option parser
// accepts, and nothing extra by default.
func TestInjectObservability(t *testing.T) {
	envOf := func(cfg Config) map[string]string {
		got, _, err := Inject(appPod(), cfg, Policy{})
		if err != nil {
			t.Fatal(err)
		}
		return sidecarEnv(got)
	}
	def := envOf(testCfg)
	for _, k := range []string{"EBB_REQUEST_METRICS", "EBB_OTLP_ENDPOINT", "EBB_TRACE_SAMPLING"} {
		if _, ok := def[k]; ok {
			t.Errorf("default injection sets %s", k)
		}
	}
	cfg := testCfg
	cfg.RequestMetrics = false
	cfg.Tracing.Endpoint, cfg.Tracing.Sampling = "http://otel-collector.monitoring:4318", 0.25
	env := envOf(cfg)
	o, err := ebbsidecar.ParseOptions(nil, func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("the sidecar refuses its injected environment: %v", err)
	}
	if o.RequestMetrics || o.Tracing != cfg.Tracing || o.Instance != "ebb.dev" {
		t.Errorf("sidecar options: request metrics %v, tracing %+v, instance %q", o.RequestMetrics, o.Tracing, o.Instance)
	}
}

// TestRouteControlsReachTheSidecar: the route-control annotations, each at
// its bound, and a policy's static responses reach the sidecar as
// environment variables its own option parser takes with the same values.
func TestRouteControlsReachTheSidecar(t *testing.T) {
	pod := appPod(func(p *corev1.Pod) {
		p.Annotations["ebb.dev/request-timeout"] = "24h"
		p.Annotations["ebb.dev/stream-idle-timeout"] = "24h"
		p.Annotations["ebb.dev/concurrency"] = "10000"
		p.Annotations["ebb.dev/concurrency-queue"] = "100000"
	})
	static := `[{"name":"healthz","when":"Always","pathType":"Exact","path":"/healthz","body":"ok"}]`
	got, _, err := Inject(pod, testCfg, Policy{StaticResponses: static})
	if err != nil {
		t.Fatal(err)
	}
	env := sidecarEnv(got)
	o, err := ebbsidecar.ParseOptions(nil, func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("the sidecar refuses its injected environment: %v", err)
	}
	if o.RequestTimeout != 24*time.Hour || o.StreamIdleTimeout != 24*time.Hour || o.Concurrency != 10000 || o.ConcurrencyQueue != 100000 || o.StaticResponses != static {
		t.Errorf("sidecar options: request timeout %v, stream idle timeout %v, concurrency %d, queue %d, static responses %q",
			o.RequestTimeout, o.StreamIdleTimeout, o.Concurrency, o.ConcurrencyQueue, o.StaticResponses)
	}
	for _, k := range []string{"ebb.dev/request-timeout", "ebb.dev/stream-idle-timeout", "ebb.dev/concurrency", "ebb.dev/concurrency-queue"} {
		past := appPod(func(p *corev1.Pod) {
			p.Annotations[k] = map[string]string{"ebb.dev/request-timeout": "24h1s", "ebb.dev/stream-idle-timeout": "24h1s",
				"ebb.dev/concurrency": "10001", "ebb.dev/concurrency-queue": "100001"}[k]
			if k == "ebb.dev/concurrency-queue" {
				p.Annotations["ebb.dev/concurrency"] = "1"
			}
		})
		if _, _, err := Inject(past, testCfg, Policy{}); err == nil || !strings.Contains(err.Error(), "annotation "+k+"=") {
			t.Errorf("%s one past its bound: Inject = %v, want it refused naming the annotation", k, err)
		}
	}
}

// sidecarEnv is the sidecar's environment as its process gets it, after
// the kubelet's expansion.
func sidecarEnv(pod *corev1.Pod) map[string]string {
	for i := range pod.Spec.InitContainers {
		if c := &pod.Spec.InitContainers[i]; c.Name == ContainerName {
			return injecttest.ContainerEnv(c)
		}
	}
	return nil
}

// TestDollarsReachTheSidecarAsWritten: the kubelet expands $ in every env
// value, so the webhook escapes each $ of what it writes there (a policy's
// static responses, the app's readiness probe): header names X$$A and X$A
// (both valid header names, two names for the CRD) must not become one
// name (the sidecar refuses it and every new pod crash-loops), a body with
// $$ must not lose a $, and $(EBB_LISTEN) must not become the sidecar's
// listen address.
func TestDollarsReachTheSidecarAsWritten(t *testing.T) {
	static := `[{"name":"a","when":"Always","pathType":"PathPrefix","path":"/","headers":[{"name":"X$$A","value":"$(EBB_LISTEN)"},{"name":"X$A","value":"1"}],"body":"costs $$5"}]`
	pod := appPod(func(p *corev1.Pod) {
		p.Spec.Containers[0].ReadinessProbe.HTTPGet.Path = "/ready$$(POD_NAME)"
		p.Spec.Containers[0].ReadinessProbe.HTTPGet.HTTPHeaders = []corev1.HTTPHeader{{Name: "X-Token", Value: "$(EBB_LISTEN)$$"}}
	})
	got, _, err := Inject(pod, testCfg, Policy{StaticResponses: static})
	if err != nil {
		t.Fatal(err)
	}
	env := sidecarEnv(got)
	o, err := ebbsidecar.ParseOptions(nil, func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("the sidecar refuses its injected environment (every new pod crash-loops): %v", err)
	}
	if o.StaticResponses != static {
		t.Errorf("the sidecar's static responses differ from the policy's (and the activator's):\nwritten %s\nsidecar %s", static, o.StaticResponses)
	}
	if !strings.Contains(o.AppReadiness, `"/ready$$(POD_NAME)"`) || !strings.Contains(o.AppReadiness, `"$(EBB_LISTEN)$$"`) {
		t.Errorf("the sidecar's app readiness check differs from the probe: %s", o.AppReadiness)
	}
}
