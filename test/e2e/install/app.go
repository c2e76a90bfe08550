package install

import (
	"context"
	"fmt"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/test/cluster"
	"github.com/ebb-dev/ebb/webhook/inject"
)

// AppPort is where the test app listens in its pod.
const AppPort = 8080

// OptIn are the labels of an app namespace: opted in to the release's
// injection, and enforcing Pod Security "restricted".
func (r *Release) OptIn() map[string]string {
	labels := cluster.PodSecurityRestricted()
	labels[r.Names.InjectLabel()] = "enabled"
	return labels
}

// Restrict makes a pod spec pass Pod Security "restricted": non-root with
// the runtime's seccomp profile, and every container without privilege
// escalation or capabilities, on a read-only root filesystem.
func Restrict(spec *corev1.PodSpec) {
	spec.SecurityContext = &corev1.PodSecurityContext{
		RunAsNonRoot:   ptr.To(true),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	for i := range spec.Containers {
		spec.Containers[i].SecurityContext = inject.RestrictedSecurityContext()
	}
}

// App is an app as a user writes it for ebb: a Deployment of the test app
// whose pod template carries the app label and the hosts annotation of the
// release's instance, with a port named "http" (the webhook gives that name
// to the sidecar) and a readiness probe on it, passing Pod Security
// "restricted"; no sidecar, the webhook injects it.
func (r *Release) App(ns, name, hosts string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{r.Names.AppLabel(): name}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{r.Names.HostsAnnotation(): hosts}},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To(int64(5)),
					Containers: []corev1.Container{{
						Name:  "app",
						Image: "ghcr.io/ebb-dev/ebb-test-app:dev",
						Args:  []string{"--listen=:" + strconv.Itoa(AppPort)},
						Env: []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{
							FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"},
						}}},
						Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: AppPort}},
						ReadinessProbe: &corev1.Probe{
							ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http")}},
							PeriodSeconds: 1,
						},
					}},
				},
			},
		},
	}
	Restrict(&d.Spec.Template.Spec)
	return d
}

// Service sends port 80 to the pods' port named "http" (the sidecar once
// injected).
func (r *Release) Service(ns, name string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{r.Names.AppLabel(): name},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}},
		},
	}
}

// Scaling is a ScaledObject's bounds and timing.
type Scaling struct {
	Max                       int64
	PollingInterval, Cooldown int64 // seconds
	TargetConcurrency         int
	RateWindow                string // the scaler's rateWindow metadata; its default if empty
	// HPABehavior is the HPA's behavior (KEDA's advanced settings); the
	// HPA's defaults if nil (scale-down stabilised over 5 minutes).
	HPABehavior map[string]any
	// FallbackReplicas and FallbackFailures are the ScaledObject's fallback;
	// none if FallbackReplicas is 0.
	FallbackReplicas, FallbackFailures int64
}

// ScaledObject scales the Deployment name 0↔Max on the counts of app name
// through the chart's scaler Service.
func (r *Release) ScaledObject(ns, name string, s Scaling) cluster.ScaledObject {
	meta := map[string]string{"scalerAddress": r.ScalerAddress, "app": name, "targetConcurrency": strconv.Itoa(s.TargetConcurrency)}
	if s.RateWindow != "" {
		meta["rateWindow"] = s.RateWindow
	}
	so := cluster.ScaledObject{Namespace: ns, Name: name, Min: 0, Max: s.Max, PollingInterval: s.PollingInterval, CooldownPeriod: s.Cooldown, Metadata: meta,
		HPABehavior: s.HPABehavior, FallbackReplicas: s.FallbackReplicas, FallbackFailures: s.FallbackFailures}
	if r.ScalerAuth != "" {
		so.AuthenticationRef = map[string]any{"kind": "ClusterTriggerAuthentication", "name": r.ScalerAuth}
	}
	return so
}

// HandOffEndpoints counts the ready endpoints of the activator's hand-off
// EndpointSlices of a Service (managed by this release's activator).
func (r *Release) HandOffEndpoints(ctx context.Context, c *cluster.Cluster, ns, svc string) (int, error) {
	slices, err := c.Client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc + "," +
		discoveryv1.LabelManagedBy + "=" + r.Names.EndpointSliceManagedBy()})
	if err != nil {
		return 0, fmt.Errorf("list hand-off slices of %s/%s: %w", ns, svc, err)
	}
	n := 0
	for _, s := range slices.Items {
		for _, e := range s.Endpoints {
			if e.Conditions.Ready == nil || *e.Conditions.Ready {
				n++
			}
		}
	}
	return n, nil
}

// AppRoute reads the app's AppRoute of this release's instance, nil if none.
func (r *Release) AppRoute(ctx context.Context, c *cluster.Cluster, ns, name string) (*routingv1alpha1.AppRoute, error) {
	dyn, err := dynamic.NewForConfig(c.RestConfig)
	if err != nil {
		return nil, err
	}
	u, err := dyn.Resource(routingv1alpha1.GroupVersionResource(r.Names.Group())).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	var route routingv1alpha1.AppRoute
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &route); err != nil {
		return nil, err
	}
	return &route, nil
}
