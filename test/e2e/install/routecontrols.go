package install

import (
	"context"
	"fmt"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/test/cluster"
)

// Annotate sets annotations of the Deployment's pod template, each name
// prefixed with the release's suffix ("request-timeout" becomes
// "<suffix>/request-timeout").
func (r *Release) Annotate(d *appsv1.Deployment, annotations map[string]string) {
	if d.Spec.Template.Annotations == nil {
		d.Spec.Template.Annotations = map[string]string{}
	}
	for k, v := range annotations {
		d.Spec.Template.Annotations[r.Names.Key(k)] = v
	}
}

// CreateRoutePolicy creates the RoutePolicy in the release's group.
func (r *Release) CreateRoutePolicy(ctx context.Context, c *cluster.Cluster, p *routingv1alpha1.RoutePolicy) error {
	p = p.DeepCopy()
	p.APIVersion = routingv1alpha1.GroupVersion(r.Names.Group()).String()
	p.Kind = routingv1alpha1.RoutePolicyKind
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(p)
	if err != nil {
		return fmt.Errorf("convert RoutePolicy %s/%s: %w", p.Namespace, p.Name, err)
	}
	dyn, err := dynamic.NewForConfig(c.RestConfig)
	if err != nil {
		return err
	}
	gvr := routingv1alpha1.GroupVersion(r.Names.Group()).WithResource(routingv1alpha1.RoutePolicyResource)
	if _, err := dyn.Resource(gvr).Namespace(p.Namespace).Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create RoutePolicy %s/%s: %w", p.Namespace, p.Name, err)
	}
	return nil
}

// RoutePolicy reads a RoutePolicy of the release's group.
func (r *Release) RoutePolicy(ctx context.Context, c *cluster.Cluster, ns, name string) (*routingv1alpha1.RoutePolicy, error) {
	dyn, err := dynamic.NewForConfig(c.RestConfig)
	if err != nil {
		return nil, err
	}
	gvr := routingv1alpha1.GroupVersion(r.Names.Group()).WithResource(routingv1alpha1.RoutePolicyResource)
	u, err := dyn.Resource(gvr).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	var p routingv1alpha1.RoutePolicy
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// WaitRoute waits until the app's AppRoute satisfies ok, and returns it
// (the last one read if it never did).
func (r *Release) WaitRoute(ctx context.Context, c *cluster.Cluster, ns, name, what string, timeout time.Duration, ok func(*routingv1alpha1.AppRoute) bool) (*routingv1alpha1.AppRoute, error) {
	var last *routingv1alpha1.AppRoute
	err := cluster.WaitFor(ctx, timeout, "AppRoute "+ns+"/"+name+": "+what, func(ctx context.Context) (bool, error) {
		route, err := r.AppRoute(ctx, c, ns, name)
		if err != nil {
			return false, nil // not there yet, or a passing error: try again
		}
		last = route
		return ok(route), nil
	})
	if err != nil {
		return last, fmt.Errorf("%w; last seen:\n%s", err, RouteYAML(last))
	}
	return last, nil
}

// Propagated tells whether every ready activator replica of the pool that
// admits the route serves the route's current generation.
func Propagated(route *routingv1alpha1.AppRoute) bool {
	c := apimeta.FindStatusCondition(route.Status.Conditions, routingv1alpha1.ConditionPropagated)
	return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == route.Generation
}

// WaitPolicyApplied waits until the RoutePolicy ns/policy is Accepted, its
// app's AppRoute names it (spec.policy) and satisfies applied, and the
// activators serve that generation of the route.
func (r *Release) WaitPolicyApplied(ctx context.Context, c *cluster.Cluster, ns, policy, app string, timeout time.Duration, applied func(*routingv1alpha1.AppRoute) bool) (*routingv1alpha1.AppRoute, error) {
	deadline := time.Now().Add(timeout)
	var last *routingv1alpha1.RoutePolicy
	err := cluster.WaitFor(ctx, timeout, "RoutePolicy "+ns+"/"+policy+" Accepted", func(ctx context.Context) (bool, error) {
		p, err := r.RoutePolicy(ctx, c, ns, policy)
		if err != nil {
			return false, nil
		}
		last = p
		a := apimeta.FindStatusCondition(p.Status.Conditions, routingv1alpha1.ConditionAccepted)
		return a != nil && a.Status == metav1.ConditionTrue && a.ObservedGeneration == p.Generation, nil
	})
	if err != nil {
		y, _ := yaml.Marshal(last)
		return nil, fmt.Errorf("%w; last seen:\n%s", err, y)
	}
	return r.WaitRoute(ctx, c, ns, app, "spec.policy "+policy+", the policy applied and propagated to the activators", time.Until(deadline), func(route *routingv1alpha1.AppRoute) bool {
		return route.Spec.Policy == policy && applied(route) && Propagated(route)
	})
}

// RouteYAML is the AppRoute's spec and status as YAML, for messages.
func RouteYAML(route *routingv1alpha1.AppRoute) string {
	if route == nil {
		return "(none)"
	}
	y, err := yaml.Marshal(map[string]any{"metadata": map[string]any{"generation": route.Generation}, "spec": route.Spec, "status": route.Status})
	if err != nil {
		return err.Error()
	}
	return string(y)
}

// RouteCondition is the AppRoute's condition of that type, nil if none.
func RouteCondition(route *routingv1alpha1.AppRoute, conditionType string) *metav1.Condition {
	if route == nil {
		return nil
	}
	return apimeta.FindStatusCondition(route.Status.Conditions, conditionType)
}

// PlainApp is a Deployment and a Service (port 80 to the test app's port)
// of the test app that ebb leaves alone: no app label of ebb's, so it is
// neither injected nor routed, as a fallback Service a user already runs.
// env is added to the app's environment.
func PlainApp(ns, name string, replicas int32, env map[string]string) (*appsv1.Deployment, *corev1.Service) {
	labels := map[string]string{"app.kubernetes.io/name": name}
	var vars []corev1.EnvVar
	vars = append(vars, corev1.EnvVar{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}})
	for k, v := range env {
		vars = append(vars, corev1.EnvVar{Name: k, Value: v})
	}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To(int64(5)),
					Containers: []corev1.Container{{
						Name:  "app",
						Image: "ghcr.io/ebb-dev/ebb-test-app:dev",
						Args:  []string{"--listen=:" + strconv.Itoa(AppPort)},
						Env:   vars,
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
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.ServiceSpec{
			Selector: labels,
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}},
		},
	}
	return d, svc
}
