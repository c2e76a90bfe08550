package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/internal/workload"
	"github.com/ebb-dev/ebb/webhook/inject"
)

// FieldManager is the server-side-apply field manager of everything the
// webhook writes.
const FieldManager = "ebb-webhook"

// routes derives AppRoutes from Deployments and applies them.
type routes struct {
	names  groupsuffix.Names
	cfg    inject.Config
	client client.Client // reads typed objects from the manager's cache
	cache  client.Reader // the manager's cache itself, for unstructured objects (KEDA's)
	// gateway says whether HTTPRoutes are served and watched (nil: never).
	gateway *optionalAPI
	// policies gives an app's RoutePolicy (nil: none is read).
	policies *policies
}

// injectors lists the ebb instances whose webhooks take a pod labelled
// podLabels in a namespace labelled nsLabels, in the order the API server
// calls them: by MutatingWebhookConfiguration name, sidecar-injector.<suffix>.
// An instance is known by the labels its webhook selects on:
// <suffix>/inject=enabled on the namespace and <suffix>/app (any value) on
// the pod. The first of them that is installed injects the sidecar; every
// later one finds it and leaves the pod alone.
func injectors(nsLabels, podLabels map[string]string) []groupsuffix.Names {
	const injectKey = "/inject"
	var out []groupsuffix.Names
	for k, v := range nsLabels {
		suffix, ok := strings.CutSuffix(k, injectKey)
		if !ok || v != groupsuffix.InjectEnabled {
			continue
		}
		n, err := groupsuffix.New(suffix)
		if err != nil {
			continue
		}
		if _, ok := podLabels[n.AppLabel()]; ok {
			out = append(out, n)
		}
	}
	sort.Slice(out, func(i, j int) bool { return ConfigurationName(out[i]) < ConfigurationName(out[j]) })
	return out
}

// desired is the AppRoute of d's pod template and of the Ingresses and
// HTTPRoutes naming its Service, with the Service it found (nil if none)
// and the report of its hosts and fallback. spec.fallback is written only
// when the fallback is ready (fallbackReady): the activator uses it as it is.
func (r *routes) desired(ctx context.Context, w *workload.Workload) (*routingv1alpha1.AppRoute, inject.App, *corev1.Service, hostReport, error) {
	app, err := inject.ParseApp(w.Namespace(), &w.Template.ObjectMeta, &w.Template.Spec, r.cfg)
	if err != nil {
		return nil, inject.App{}, nil, hostReport{}, err
	}
	svc, port, err := r.findService(ctx, w.Namespace(), w.Template.Labels, app)
	if err != nil {
		return nil, app, nil, hostReport{}, err
	}
	claims, skipped, err := r.hostPaths(ctx, w.Namespace(), svc, port)
	if err != nil {
		return nil, app, nil, hostReport{}, err
	}
	hostPaths, report := mergeHosts(app.Hosts, r.names.HostsAnnotation(), claims, skipped)
	route := &routingv1alpha1.AppRoute{
		TypeMeta: metav1.TypeMeta{APIVersion: routingv1alpha1.GroupVersion(r.names.Group()).String(), Kind: routingv1alpha1.Kind},
		ObjectMeta: metav1.ObjectMeta{
			Name: app.Name, Namespace: w.Namespace(),
			Labels:          routeLabels(app, r.names),
			OwnerReferences: []metav1.OwnerReference{w.OwnerRef()},
		},
		Spec: routingv1alpha1.AppRouteSpec{
			Hosts:          app.Hosts,
			PathPrefixes:   app.PathPrefixes,
			HostPaths:      hostPaths,
			ScaleTargetRef: routingv1alpha1.ScaleTargetReference{APIVersion: w.GVK.GroupVersion().String(), Kind: w.GVK.Kind, Name: w.Name()},
			AppPort:        app.Port,
			AppPortName:    app.PortName,
			QueueSize:      app.QueueSize,
		},
	}
	if app.ColdStartTimeout > 0 {
		route.Spec.ColdStartTimeout = &metav1.Duration{Duration: app.ColdStartTimeout}
	}
	duration := func(d time.Duration) *metav1.Duration {
		if d == 0 {
			return nil
		}
		return &metav1.Duration{Duration: d}
	}
	route.Spec.RequestTimeout = duration(app.RequestTimeout)
	route.Spec.ResponseHeaderTimeout = duration(app.ResponseHeaderTimeout)
	route.Spec.StreamIdleTimeout = duration(app.StreamIdleTimeout)
	route.Spec.Concurrency = app.Concurrency
	if app.Placeholder {
		// The AppRoute has no spec field for it (yet): the activator reads
		// this annotation.
		route.Annotations = map[string]string{r.names.Key(inject.AnnotationPlaceholder): "true"}
	}
	if svc != nil {
		route.Spec.Service = routingv1alpha1.ServiceReference{Name: svc.Name, Port: port}
	}
	if app.Fallback != "" {
		fb := &routingv1alpha1.ServiceReference{Name: app.Fallback, Port: app.FallbackPort}
		cond, err := r.fallbackReady(ctx, w.Namespace(), fb, route.Spec.Service.Name)
		if err != nil {
			return nil, app, nil, hostReport{}, err
		}
		if cond.Status == metav1.ConditionTrue {
			route.Spec.Fallback = fb
		}
		report.fallback = &cond
	}
	if err := r.withPolicy(ctx, route); err != nil {
		return nil, app, nil, hostReport{}, err
	}
	return route, app, svc, report, nil
}

// withPolicy copies the app's RoutePolicy into route's spec: its static
// responses as they are (unless the data path would refuse them), its
// placeholder with the page read from the ConfigMap (unless it cannot be
// read), and its name. The policy's Accepted condition says what was left
// out (policyReconciler).
func (r *routes) withPolicy(ctx context.Context, route *routingv1alpha1.AppRoute) error {
	if r.policies == nil {
		return nil
	}
	all, err := r.policies.forApp(ctx, route.Namespace, route.Name)
	if err != nil || len(all) == 0 {
		return err
	}
	pol := &all[0]
	route.Spec.Policy = pol.Name
	if _, err := staticJSON(pol); err == nil {
		route.Spec.StaticResponses = pol.Spec.StaticResponses
	}
	ph, _, err := r.policies.placeholder(ctx, pol)
	if err != nil {
		return err
	}
	route.Spec.Placeholder = ph
	return r.policies.withWakes(ctx, route, pol)
}

// routeLabels are the AppRoute's labels: the <suffix>/route-labels of the
// pod template (activator pools select by them) and the app label.
func routeLabels(app inject.App, n groupsuffix.Names) map[string]string {
	out := make(map[string]string, len(app.RouteLabels)+1)
	maps.Copy(out, app.RouteLabels)
	out[n.AppLabel()] = app.Name
	return out
}

// findService picks the Service of the app: the one the annotation names,
// else the one whose selector matches the pod labels (preferring one that
// reaches the sidecar, then by name). It returns nil when there is none.
func (r *routes) findService(ctx context.Context, ns string, podLabels map[string]string, app inject.App) (*corev1.Service, int32, error) {
	if app.Service != "" {
		var svc corev1.Service
		err := r.client.Get(ctx, types.NamespacedName{Namespace: ns, Name: app.Service}, &svc, client.UnsafeDisableDeepCopy)
		if apierrors.IsNotFound(err) {
			return nil, 0, nil
		}
		if err != nil {
			return nil, 0, fmt.Errorf("get Service %s/%s: %w", ns, app.Service, err)
		}
		return svc.DeepCopy(), reach(&svc, app, r.cfg).port, nil
	}
	var list corev1.ServiceList
	if err := r.client.List(ctx, &list, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil { // read only
		return nil, 0, fmt.Errorf("list Services in %s: %w", ns, err)
	}
	var matches []*corev1.Service
	for i := range list.Items {
		s := &list.Items[i]
		if len(s.Spec.Selector) > 0 && labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(podLabels)) {
			matches = append(matches, s)
		}
	}
	if len(matches) == 0 {
		return nil, 0, nil
	}
	// A Service reaching the sidecar first, then a ClusterIP one before a
	// headless one: a StatefulSet's governing Service is headless, and the
	// one its clients should use is another (see reach).
	sort.Slice(matches, func(i, j int) bool {
		ri, rj := reach(matches[i], app, r.cfg).ok, reach(matches[j], app, r.cfg).ok
		if ri != rj {
			return ri
		}
		if hi, hj := headless(matches[i]), headless(matches[j]); hi != hj {
			return hj
		}
		return matches[i].Name < matches[j].Name
	})
	return matches[0].DeepCopy(), reach(matches[0], app, r.cfg).port, nil
}

// reachability says whether a Service's traffic lands on the sidecar.
type reachability struct {
	ok      bool
	port    int32 // the Service port carrying the app's traffic
	reason  string
	message string
}

// headless is true of a Service without a ClusterIP (clusterIP: None).
func headless(svc *corev1.Service) bool { return svc.Spec.ClusterIP == corev1.ClusterIPNone }

// reach checks the Service's ports: a targetPort naming the sidecar's data
// port (the app port's original name) or its number reaches the sidecar; a
// targetPort of the app's number bypasses it. A headless Service reaches
// nothing: its clients resolve pod addresses and dial them on the port
// they know, the app's, past the sidecar (a targetPort is not used), and
// at zero they get the activators' addresses from DNS only through the
// hand-off slice of the route's Service.
func reach(svc *corev1.Service, app inject.App, cfg inject.Config) reachability {
	dataName := app.PortName
	if dataName == "" {
		dataName = inject.UnnamedDataPortName
	}
	if headless(svc) {
		rc := reachPorts(svc, app, cfg, dataName)
		return reachability{port: rc.port, reason: "HeadlessService",
			message: fmt.Sprintf("Service %s is headless (clusterIP: None): its clients reach the pods' addresses directly, on the app's port, past the sidecar, so their requests are not counted; "+
				"create a ClusterIP Service selecting the app's pods with targetPort: %s for clients to use (a StatefulSet keeps its headless Service for its pods' names)", svc.Name, dataName)}
	}
	return reachPorts(svc, app, cfg, dataName)
}

// reachPorts is reach of a Service with a ClusterIP.
func reachPorts(svc *corev1.Service, app inject.App, cfg inject.Config, dataName string) reachability {
	var bypass *corev1.ServicePort
	for i := range svc.Spec.Ports {
		p := &svc.Spec.Ports[i]
		if p.Protocol != "" && p.Protocol != corev1.ProtocolTCP {
			continue
		}
		tp := p.TargetPort
		if tp.Type == intstr.Int && tp.IntVal == 0 {
			tp = intstr.FromInt32(p.Port)
		}
		switch {
		case tp.Type == intstr.String && tp.StrVal == dataName, tp.Type == intstr.Int && tp.IntVal == cfg.ListenPort:
			return reachability{ok: true, port: p.Port, reason: "TargetsSidecar",
				message: fmt.Sprintf("Service %s port %d targets the sidecar (%s)", svc.Name, p.Port, tp.String())}
		case tp.Type == intstr.Int && tp.IntVal == app.Port && bypass == nil:
			bypass = p
		}
	}
	if bypass != nil {
		return reachability{port: bypass.Port, reason: "TargetsAppPortByNumber",
			message: fmt.Sprintf("Service %s port %d targets the app's port %d by number, which bypasses the sidecar so requests are not counted; set targetPort: %s", svc.Name, bypass.Port, app.Port, dataName)}
	}
	return reachability{reason: "NoPortToSidecar",
		message: fmt.Sprintf("Service %s has no TCP port targeting %q or %d", svc.Name, dataName, cfg.ListenPort)}
}

// apply writes want's labels, owner and spec by server-side apply, unless
// the cached AppRoute already has them. It returns the workload the route
// pointed at before (kind/name) when that was another one (it went, or was renamed:
// see routeReconciler.winner).
func (r *routes) apply(ctx context.Context, want *routingv1alpha1.AppRoute) (string, error) {
	var have routingv1alpha1.AppRoute
	err := r.client.Get(ctx, client.ObjectKeyFromObject(want), &have, client.UnsafeDisableDeepCopy) // read only
	switch {
	case err == nil && upToDate(&have, want) && have.Annotations[r.names.Key(inject.AnnotationPlaceholder)] == want.Annotations[r.names.Key(inject.AnnotationPlaceholder)]:
		routeApplies.WithLabelValues("unchanged").Inc()
		return "", nil
	case err != nil && !apierrors.IsNotFound(err):
		routeApplies.WithLabelValues("failed").Inc()
		return "", fmt.Errorf("get AppRoute %s/%s: %w", want.Namespace, want.Name, err)
	}
	previous := ""
	if hk, wk := targetKind(have.Spec.ScaleTargetRef), targetKind(want.Spec.ScaleTargetRef); err == nil && (have.Spec.ScaleTargetRef.Name != want.Spec.ScaleTargetRef.Name || hk != wk) {
		previous = workload.KubectlName(hk, have.Spec.ScaleTargetRef.Name)
	}
	body, err := json.Marshal(map[string]any{
		"apiVersion": want.APIVersion,
		"kind":       want.Kind,
		"metadata": map[string]any{
			"name": want.Name, "namespace": want.Namespace,
			"labels": want.Labels, "annotations": want.Annotations, "ownerReferences": want.OwnerReferences,
		},
		"spec": want.Spec,
	})
	if err != nil {
		return "", fmt.Errorf("encode AppRoute %s/%s: %w", want.Namespace, want.Name, err)
	}
	out := &routingv1alpha1.AppRoute{ObjectMeta: metav1.ObjectMeta{Name: want.Name, Namespace: want.Namespace}}
	if err := r.client.Patch(ctx, out, client.RawPatch(types.ApplyPatchType, body), client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		routeApplies.WithLabelValues("failed").Inc()
		return "", fmt.Errorf("apply AppRoute %s/%s: %w", want.Namespace, want.Name, err)
	}
	routeApplies.WithLabelValues("applied").Inc()
	return previous, nil
}

func upToDate(have, want *routingv1alpha1.AppRoute) bool {
	if !equality.Semantic.DeepEqual(have.Spec, want.Spec) {
		return false
	}
	for k, v := range want.Labels {
		if have.Labels[k] != v {
			return false
		}
	}
	for k := range appliedLabels(have) {
		if _, ok := want.Labels[k]; !ok {
			return false // a route label the pod template no longer has
		}
	}
	for k, v := range want.Annotations {
		if have.Annotations[k] != v {
			return false
		}
	}
	for _, w := range want.OwnerReferences {
		found := false
		for _, h := range have.OwnerReferences {
			found = found || (h.UID == w.UID && h.Controller != nil && *h.Controller)
		}
		if !found {
			return false
		}
	}
	return true
}

// appliedLabels are the label keys of r that the webhook's last apply set
// (its managed fields), so a label dropped from the pod template is
// dropped from the AppRoute, and one a user set by hand is left alone.
func appliedLabels(r *routingv1alpha1.AppRoute) map[string]struct{} {
	for _, mf := range r.ManagedFields {
		if mf.Manager != FieldManager || mf.Operation != metav1.ManagedFieldsOperationApply || mf.FieldsV1 == nil {
			continue
		}
		var fields struct {
			Metadata struct {
				Labels map[string]json.RawMessage `json:"f:labels"`
			} `json:"f:metadata"`
		}
		if json.Unmarshal(mf.FieldsV1.GetRawBytes(), &fields) != nil {
			return nil
		}
		out := make(map[string]struct{}, len(fields.Metadata.Labels))
		for k := range fields.Metadata.Labels {
			if key, ok := strings.CutPrefix(k, "f:"); ok {
				out[key] = struct{}{}
			}
		}
		return out
	}
	return nil
}
