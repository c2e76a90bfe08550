package webhook_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/internal/testwait"
	"github.com/ebb-dev/ebb/test/workers"
	"github.com/ebb-dev/ebb/webhook"
	"github.com/ebb-dev/ebb/webhook/inject"
	"github.com/ebb-dev/ebb/webhook/webhooktest"
)

// One API server and two instances serve every integration test: ebb.dev
// (certificate from envtest's WebhookInstallOptions, files mode) and
// team1.example.com (self-signed mode).
var (
	env      *webhooktest.Env
	ebbNames = groupsuffix.MustNew("ebb.dev")
	t1Names  = groupsuffix.MustNew("team1.example.com")
	// procNames is the instance TestBinary runs as a process.
	procNames = groupsuffix.MustNew("proc.example.com")
)

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	os.Exit(runIntegration(m))
}

func runIntegration(m *testing.M) int {
	var err error
	env, err = webhooktest.Start([]string{ebbNames.Suffix(), t1Names.Suffix(), procNames.Suffix()})
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration tests need a kube-apiserver:", err)
		return 1
	}
	defer env.Stop()
	// ebb.dev routes Workers too, whose CRD TestWorkerCRDAppearsLater
	// installs.
	a, err := webhooktest.StartInstance(env, ebbNames.Suffix(), admissionregistrationv1.Fail, func(o *webhook.Options) {
		o.ScaleTargets = []string{workers.ScaleTarget}
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start ebb.dev instance:", err)
		return 1
	}
	defer a.Stop()
	b, err := webhooktest.StartSelfSignedInstance(env, t1Names.Suffix(), "ebb-team1", admissionregistrationv1.Fail, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "start team1.example.com instance:", err)
		return 1
	}
	defer b.Stop()
	return m.Run()
}

func needEnv(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: runs the real kube-apiserver; skipped with -short")
	}
}

// warnings collects the admission warnings the API server returns.
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) HandleWarningHeaderWithContext(_ context.Context, _ int, _ string, msg string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, msg)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := w.msgs
	w.msgs = nil
	return m
}

func newClient(t *testing.T) (client.Client, *warnings) {
	t.Helper()
	w := &warnings{}
	cfg := rest.CopyConfig(env.Config)
	cfg.WarningHandlerWithContext = w
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c, w
}

func makeNamespace(t *testing.T, c client.Client, name string, labels map[string]string) {
	t.Helper()
	if err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
}

func restricted() *corev1.SecurityContext {
	f, tr := false, true
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: &f, RunAsNonRoot: &tr,
		Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// appTemplate is an app's pod template: one container with port http/8080
// and a readiness probe on it.
func appTemplate(labels, annotations map[string]string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: annotations},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "app", Image: "hello:1",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
				HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http")},
			}},
			SecurityContext: restricted(),
		}}},
	}
}

func createPod(ctx context.Context, c client.Client, ns, name string, tmpl corev1.PodTemplateSpec, opts ...client.CreateOption) (*corev1.Pod, error) {
	pod := &corev1.Pod{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec}
	pod.Namespace, pod.Name = ns, name
	return pod, c.Create(ctx, pod, opts...)
}

func sidecars(pod *corev1.Pod) int {
	n := 0
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			if c.Name == inject.ContainerName {
				n++
			}
		}
	}
	return n
}

// deploymentChain creates a Deployment and, as its controller would, a
// ReplicaSet it owns; envtest runs no controllers. It returns the
// Deployment and a pod template whose pods the ReplicaSet owns.
func deploymentChain(t *testing.T, c client.Client, ns, name string, tmpl corev1.PodTemplateSpec, replicas int32) (*appsv1.Deployment, corev1.PodTemplateSpec) {
	t.Helper()
	ctx := context.Background()
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": name}}
	tmpl = *tmpl.DeepCopy()
	if tmpl.Labels == nil {
		tmpl.Labels = map[string]string{}
	}
	tmpl.Labels["app.kubernetes.io/name"] = name
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       appsv1.DeploymentSpec{Replicas: &replicas, Selector: sel, Template: tmpl},
	}
	if err := c.Create(ctx, d); err != nil {
		t.Fatalf("create Deployment: %v", err)
	}
	tr := true
	rsTmpl := *tmpl.DeepCopy()
	rsTmpl.Labels["pod-template-hash"] = "abc123"
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-abc123", Labels: rsTmpl.Labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: d.Name, UID: d.UID, Controller: &tr}}},
		Spec: appsv1.ReplicaSetSpec{Replicas: &replicas, Selector: sel, Template: rsTmpl},
	}
	if err := c.Create(ctx, rs); err != nil {
		t.Fatalf("create ReplicaSet: %v", err)
	}
	podTmpl := *rsTmpl.DeepCopy()
	podTmpl.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: &tr}}
	return d, podTmpl
}

// getRoute reads an AppRoute of the instance named by names, as any client
// that knows only the group would.
func getRoute(ctx context.Context, c client.Client, names groupsuffix.Names, ns, name string) (*routingv1alpha1.AppRoute, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(routingv1alpha1.GroupVersion(names.Group()).WithKind(routingv1alpha1.Kind))
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, u); err != nil {
		return nil, err
	}
	var r routingv1alpha1.AppRoute
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

func TestInjectsLabelledPodInLabelledNamespace(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	c, _ := newClient(t)
	makeNamespace(t, c, "inject-yes", map[string]string{"ebb.dev/inject": "enabled"})
	pod, err := createPod(ctx, c, "inject-yes", "hello", appTemplate(map[string]string{"ebb.dev/app": "hello"}, map[string]string{"ebb.dev/hosts": "hello.example.com"}))
	if err != nil {
		t.Fatalf("create pod: %v", err)
	}
	if n := sidecars(pod); n != 1 || len(pod.Spec.InitContainers) != 1 {
		t.Fatalf("pod has %d sidecars and init containers %v; want the sidecar", n, pod.Spec.InitContainers)
	}
	s := pod.Spec.InitContainers[0]
	got := struct {
		Restart    corev1.ContainerRestartPolicy
		Ports      []corev1.ContainerPort
		AppPort    corev1.ContainerPort
		ProbePort  intstr.IntOrString
		Annotation string
	}{*s.RestartPolicy, s.Ports, pod.Spec.Containers[0].Ports[0], pod.Spec.Containers[0].ReadinessProbe.HTTPGet.Port, pod.Annotations["ebb.dev/sidecar"]}
	want := struct {
		Restart    corev1.ContainerRestartPolicy
		Ports      []corev1.ContainerPort
		AppPort    corev1.ContainerPort
		ProbePort  intstr.IntOrString
		Annotation string
	}{corev1.ContainerRestartPolicyAlways,
		[]corev1.ContainerPort{{Name: "http", ContainerPort: 8012, Protocol: "TCP"}, {Name: "ebb-admin", ContainerPort: 8022, Protocol: "TCP"}},
		corev1.ContainerPort{Name: "ebb-app", ContainerPort: 8080, Protocol: "TCP"},
		intstr.FromInt32(8080), "ghcr.io/ebb-dev/ebb-sidecar:test"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("injected pod (-want +got):\n%s", diff)
	}
}

func TestLeavesOtherPodsAlone(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	c, _ := newClient(t)
	makeNamespace(t, c, "inject-no", nil)
	makeNamespace(t, c, "inject-yes-unlabelled-pod", map[string]string{"ebb.dev/inject": "enabled"})
	for _, tc := range []struct {
		ns     string
		labels map[string]string
	}{
		{"inject-no", map[string]string{"ebb.dev/app": "hello"}},
		{"inject-yes-unlabelled-pod", map[string]string{"app": "hello"}},
		{"inject-yes-unlabelled-pod", map[string]string{"team1.example.com/app": "hello"}},
	} {
		pod, err := createPod(ctx, c, tc.ns, "p-"+fmt.Sprint(len(tc.labels), strings.ReplaceAll(strings.Join(keys(tc.labels), ""), "/", "-")), appTemplate(tc.labels, nil))
		if err != nil {
			t.Fatalf("create pod in %s: %v", tc.ns, err)
		}
		if n := sidecars(pod); n != 0 || pod.Spec.Containers[0].Ports[0].Name != "http" {
			t.Errorf("pod in %s labelled %v was changed: %d sidecars, app port %q", tc.ns, tc.labels, n, pod.Spec.Containers[0].Ports[0].Name)
		}
	}
}

func keys(m map[string]string) []string {
	var k []string
	for key := range m {
		k = append(k, key)
	}
	return k
}

func TestInjectedPodPassesRestrictedPodSecurity(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	c, _ := newClient(t)
	makeNamespace(t, c, "restricted", map[string]string{
		"ebb.dev/inject":                     "enabled",
		"pod-security.kubernetes.io/enforce": "restricted",
	})
	labels := map[string]string{"ebb.dev/app": "hello"}
	pod, err := createPod(ctx, c, "restricted", "hello", appTemplate(labels, nil))
	if err != nil {
		t.Fatalf("injected pod refused under restricted: %v", err)
	}
	if sidecars(pod) != 1 {
		t.Fatalf("pod admitted without sidecar")
	}
	// The namespace does enforce: an app without a security context fails.
	bad := appTemplate(labels, nil)
	bad.Spec.Containers[0].SecurityContext = nil
	if _, err := createPod(ctx, c, "restricted", "unrestricted", bad); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "restricted") {
		t.Fatalf("pod without security context: err %v, want Pod Security refusal", err)
	}
}

func TestRefusesBadAnnotation(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	c, _ := newClient(t)
	makeNamespace(t, c, "refuse", map[string]string{"ebb.dev/inject": "enabled"})
	_, err := createPod(ctx, c, "refuse", "bad", appTemplate(map[string]string{"ebb.dev/app": "hello"}, map[string]string{"ebb.dev/hosts": "Bad_Host", "ebb.dev/port": "grpc"}))
	if err == nil {
		t.Fatal("pod with bad annotations admitted")
	}
	for _, want := range []string{
		`admission webhook "inject.ebb.dev" denied the request`,
		`annotation ebb.dev/hosts="Bad_Host": host "Bad_Host" is not a lowercase DNS name; fix: list lowercase DNS names`,
		`annotation ebb.dev/port="grpc": no container of the pod declares this port; fix:`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q\nlacks %q", err.Error(), want)
		}
	}
}

// TestUnknownKeysAndUnselectedAppsAreReported: a misspelled key is no
// longer ignored silently (an admission warning for a pod, a Warning event
// on a Deployment, each naming the key meant), nor is an app labelled in a
// namespace that no instance injects (a Warning event on its Deployment).
func TestUnknownKeysAndUnselectedAppsAreReported(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	c, warned := newClient(t)
	makeNamespace(t, c, "typo", map[string]string{"ebb.dev/inject": "enabled"})
	makeNamespace(t, c, "not-opted-in", nil)
	typo := appTemplate(map[string]string{"ebb.dev/app": "typo"}, map[string]string{"ebb.dev/hsots": "typo.example.com"})

	if _, err := createPod(ctx, c, "typo", "typo-pod", typo); err != nil {
		t.Fatal(err)
	}
	want := `annotation "ebb.dev/hsots" is not a key ebb reads: did you mean "ebb.dev/hosts"?`
	if w := warned.take(); !slices.Contains(w, want) {
		t.Errorf("admission warnings %q, want %q", w, want)
	}

	deploymentChain(t, c, "typo", "typo", typo, 0)
	testwait.Check(t, 10*time.Second, func() error { return wantEvent(ctx, c, "typo", "typo", "UnknownKeys", want) })

	// The placeholder key, like every other, is set on the pod template and
	// reaches the AppRoute.
	placeholder := appTemplate(map[string]string{"ebb.dev/app": "waiting"}, map[string]string{"ebb.dev/placeholder": "true"})
	deploymentChain(t, c, "typo", "waiting", placeholder, 0)
	testwait.Check(t, 10*time.Second, func() error {
		r, err := getRoute(ctx, c, ebbNames, "typo", "waiting")
		if err != nil {
			return err
		}
		if r.Annotations["ebb.dev/placeholder"] != "true" {
			return fmt.Errorf("AppRoute annotations %v, want ebb.dev/placeholder=true from the template", r.Annotations)
		}
		return nil
	})
	var waiting appsv1.Deployment
	if err := c.Get(ctx, client.ObjectKey{Namespace: "typo", Name: "waiting"}, &waiting); err != nil {
		t.Fatal(err)
	}
	delete(waiting.Spec.Template.Annotations, "ebb.dev/placeholder")
	if err := c.Update(ctx, &waiting); err != nil {
		t.Fatal(err)
	}
	testwait.Check(t, 10*time.Second, func() error {
		r, err := getRoute(ctx, c, ebbNames, "typo", "waiting")
		if err != nil {
			return err
		}
		if _, ok := r.Annotations["ebb.dev/placeholder"]; ok {
			return fmt.Errorf("AppRoute annotations %v after the template dropped ebb.dev/placeholder", r.Annotations)
		}
		return nil
	})

	deploymentChain(t, c, "not-opted-in", "lonely", appTemplate(map[string]string{"ebb.dev/app": "lonely"}, nil), 0)
	testwait.Check(t, 10*time.Second, func() error {
		return wantEvent(ctx, c, "not-opted-in", "lonely", "NamespaceNotOptedIn", "namespace not-opted-in is not labelled ebb.dev/inject=enabled")
	})
}

// TestConflictedHosts: of two AppRoutes claiming one host, the younger says
// on its status that the older serves it, and stops saying so once the
// older is gone.
func TestConflictedHosts(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	c, _ := newClient(t)
	for _, ns := range []string{"claim-a", "claim-b"} {
		makeNamespace(t, c, ns, map[string]string{"ebb.dev/inject": "enabled"})
	}
	tmpl := func(app string) corev1.PodTemplateSpec {
		return appTemplate(map[string]string{"ebb.dev/app": app}, map[string]string{"ebb.dev/hosts": "shared.example.com,*.wild.example.com,own-" + app + ".example.com"})
	}
	older, _ := deploymentChain(t, c, "claim-a", "first", tmpl("first"), 0)
	testwait.Check(t, 10*time.Second, func() error {
		_, err := getRoute(ctx, c, ebbNames, "claim-a", "first")
		return err
	})
	time.Sleep(1100 * time.Millisecond) // creation timestamps have whole seconds
	deploymentChain(t, c, "claim-b", "second", tmpl("second"), 0)
	testwait.Check(t, 10*time.Second, func() error {
		if err := wantCondition(ctx, c, "claim-a", "first", routingv1alpha1.ConditionConflicted, metav1.ConditionFalse, "NoConflict"); err != nil {
			return err
		}
		r, err := getRoute(ctx, c, ebbNames, "claim-b", "second")
		if err != nil {
			return err
		}
		cond := meta.FindStatusCondition(r.Status.Conditions, routingv1alpha1.ConditionConflicted)
		if cond == nil || cond.Status != metav1.ConditionTrue || !strings.Contains(cond.Message, "host shared.example.com path / (ClaimedByOlderRoute: AppRoute claim-a/first serves it)") ||
			!strings.Contains(cond.Message, "host *.wild.example.com path / (ClaimedByOlderRoute: AppRoute claim-a/first serves it)") || strings.Contains(cond.Message, "own-") {
			return fmt.Errorf("Conflicted of the younger route = %+v", cond)
		}
		return nil
	})
	if err := c.Delete(ctx, older); err != nil {
		t.Fatal(err)
	}
	route := &unstructured.Unstructured{}
	route.SetGroupVersionKind(routingv1alpha1.GroupVersion(ebbNames.Group()).WithKind(routingv1alpha1.Kind))
	route.SetNamespace("claim-a")
	route.SetName("first")
	if err := c.Delete(ctx, route); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err) // envtest runs no garbage collector
	}
	testwait.Check(t, 10*time.Second, func() error {
		r, err := getRoute(ctx, c, ebbNames, "claim-b", "second")
		if err != nil {
			return err
		}
		if cond := meta.FindStatusCondition(r.Status.Conditions, routingv1alpha1.ConditionConflicted); cond == nil || cond.Status != metav1.ConditionFalse {
			return fmt.Errorf("Conflicted after the older route went = %+v", cond)
		}
		return nil
	})
}

// TestPodsWithoutSidecar: pods that started before their namespace was
// labelled run without the sidecar; the AppRoute says so and how to fix it,
// and says it no more as soon as the pod is replaced by an injected one.
func TestPodsWithoutSidecar(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	c, _ := newClient(t)
	makeNamespace(t, c, "late", nil)
	_, podTmpl := deploymentChain(t, c, "late", "early", appTemplate(map[string]string{"ebb.dev/app": "early"}, nil), 1)
	if _, err := createPod(ctx, c, "late", "early-1", podTmpl); err != nil {
		t.Fatal(err)
	}
	var ns corev1.Namespace
	if err := c.Get(ctx, client.ObjectKey{Name: "late"}, &ns); err != nil {
		t.Fatal(err)
	}
	ns.Labels = map[string]string{"ebb.dev/inject": "enabled"}
	if err := c.Update(ctx, &ns); err != nil {
		t.Fatal(err)
	}
	testwait.Check(t, 10*time.Second, func() error {
		r, err := getRoute(ctx, c, ebbNames, "late", "early")
		if err != nil {
			return err
		}
		cond := meta.FindStatusCondition(r.Status.Conditions, routingv1alpha1.ConditionPodsInjected)
		if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != "PodsWithoutSidecar" ||
			!strings.Contains(cond.Message, "1 of 1 pods run without the ebb sidecar") || !strings.Contains(cond.Message, "kubectl rollout restart deployment/early -n late") {
			return fmt.Errorf("PodsInjected = %+v", cond)
		}
		return nil
	})

	// Restarted: the new pod is injected, the old one gone.
	if err := c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "late", Name: "early-1"}}, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	if _, err := createPod(ctx, c, "late", "early-2", podTmpl); err != nil {
		t.Fatal(err)
	}
	// The pod watch brings the reconcile (envtest has no EndpointSlices).
	testwait.Check(t, 5*time.Second, func() error {
		return wantCondition(ctx, c, "late", "early", routingv1alpha1.ConditionPodsInjected, metav1.ConditionTrue, "AllInjected")
	})
}

// wantEvent finds a Warning event with reason about the Deployment ns/name
// whose note contains note.
func wantEvent(ctx context.Context, c client.Client, ns, name, reason, note string) error {
	var list eventsv1.EventList
	if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return err
	}
	var seen []string
	for _, e := range list.Items {
		if e.Regarding.Kind == "Deployment" && e.Regarding.Name == name {
			seen = append(seen, e.Reason+": "+e.Note)
			if e.Type == corev1.EventTypeWarning && e.Reason == reason && strings.Contains(e.Note, note) {
				return nil
			}
		}
	}
	return fmt.Errorf("no Warning event %s with %q on Deployment %s/%s; its events: %q", reason, note, ns, name, seen)
}

// TestRegistersAppRoute follows one app: the controller routes its
// Deployment before any pod exists, admissions (dry run or not) add no
// warning, and the route's spec and status follow the template, the Service
// and its EndpointSlices. (That a dry run writes nothing is shown by
// TestHandleEnqueues: the handler makes no API call and, on a dry run, does
// not even tell the controller.)
func TestRegistersAppRoute(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	c, warned := newClient(t)
	ns := "register"
	makeNamespace(t, c, ns, map[string]string{"ebb.dev/inject": "enabled"})
	d, podTmpl := deploymentChain(t, c, ns, "shop", appTemplate(map[string]string{"ebb.dev/app": "shop"},
		map[string]string{"ebb.dev/hosts": "shop.example.com,*.shop.example.com", "ebb.dev/paths": "/api", "ebb.dev/cold-start-timeout": "45s"}), 1)
	testwait.Check(t, 10*time.Second, func() error {
		_, err := getRoute(ctx, c, ebbNames, ns, "shop")
		return err
	})

	dry, err := createPod(ctx, c, ns, "shop-dry", podTmpl, client.DryRunAll)
	if err != nil {
		t.Fatalf("dry-run create: %v", err)
	}
	if sidecars(dry) != 1 {
		t.Fatalf("dry-run pod not injected")
	}
	if _, err := createPod(ctx, c, ns, "shop-1", podTmpl); err != nil {
		t.Fatalf("create pod: %v", err)
	}
	if w := warned.take(); len(w) > 0 {
		t.Errorf("admission warnings %q, want none", w)
	}
	route, err := getRoute(ctx, c, ebbNames, ns, "shop")
	if err != nil {
		t.Fatalf("AppRoute after admission: %v", err)
	}
	tr := true
	wantOwner := []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "shop", UID: d.UID, Controller: &tr}}
	if diff := cmp.Diff(wantOwner, route.OwnerReferences); diff != "" {
		t.Errorf("owner (-want +got):\n%s", diff)
	}
	wantSpec := routingv1alpha1.AppRouteSpec{
		Hosts: []string{"shop.example.com", "*.shop.example.com"}, PathPrefixes: []string{"/api"},
		ScaleTargetRef: routingv1alpha1.ScaleTargetReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "shop"},
		AppPort:        8080, AppPortName: "http",
		ColdStartTimeout: &metav1.Duration{Duration: 45 * time.Second},
	}
	if diff := cmp.Diff(wantSpec, route.Spec); diff != "" {
		t.Errorf("spec (-want +got):\n%s", diff)
	}
	if _, err := getRoute(ctx, c, t1Names, ns, "shop"); !apierrors.IsNotFound(err) && !meta.IsNoMatchError(err) {
		t.Errorf("team1 AppRoute in an ebb.dev namespace: %v", err)
	}

	// Status: no Service yet.
	testwait.Check(t, 10*time.Second, func() error {
		return wantCondition(ctx, c, ns, "shop", routingv1alpha1.ConditionReady, metav1.ConditionFalse, "NoService")
	})

	// A Service targeting the app's port by number bypasses the sidecar.
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shop"}, Spec: corev1.ServiceSpec{
		Selector: map[string]string{"app.kubernetes.io/name": "shop"},
		Ports:    []corev1.ServicePort{{Name: "web", Port: 80, TargetPort: intstr.FromInt32(8080)}},
	}}
	if err := c.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	testwait.Check(t, 10*time.Second, func() error {
		return wantCondition(ctx, c, ns, "shop", routingv1alpha1.ConditionSidecarReachable, metav1.ConditionFalse, "TargetsAppPortByNumber")
	})
	svc.Spec.Ports[0].TargetPort = intstr.FromString("http")
	if err := c.Update(ctx, svc); err != nil {
		t.Fatal(err)
	}
	testwait.Check(t, 10*time.Second, func() error {
		return wantCondition(ctx, c, ns, "shop", routingv1alpha1.ConditionSidecarReachable, metav1.ConditionTrue, "TargetsSidecar")
	})
	testwait.Check(t, 10*time.Second, func() error {
		return wantCondition(ctx, c, ns, "shop", routingv1alpha1.ConditionReady, metav1.ConditionTrue, "Routed")
	})

	// Ready endpoints come from the Service's slices; the activator's
	// hand-off slice counts as "activator in path", not as endpoints.
	tr2, fa := true, false
	slice := func(name, managedBy string, ready ...bool) *discoveryv1.EndpointSlice {
		s := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{
				discoveryv1.LabelServiceName: "shop", discoveryv1.LabelManagedBy: managedBy}},
			AddressType: discoveryv1.AddressTypeIPv4,
		}
		for i, r := range ready {
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.0.0.%d", i+1)}, Conditions: discoveryv1.EndpointConditions{Ready: map[bool]*bool{true: &tr2, false: &fa}[r]}})
		}
		return s
	}
	for _, s := range []*discoveryv1.EndpointSlice{slice("shop-pods", "endpointslice-controller.k8s.io", true, true, false), slice("shop-activator", "activator.ebb.dev", true)} {
		if err := c.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	testwait.Check(t, 10*time.Second, func() error {
		r, err := getRoute(ctx, c, ebbNames, ns, "shop")
		if err != nil {
			return err
		}
		if r.Status.ReadyEndpoints != 2 || !r.Status.ActivatorInPath {
			return fmt.Errorf("readyEndpoints %d, activatorInPath %v; want 2, true", r.Status.ReadyEndpoints, r.Status.ActivatorInPath)
		}
		return nil
	})

	// At zero, a host change in the template still reaches the route.
	var cur appsv1.Deployment
	if err := c.Get(ctx, client.ObjectKeyFromObject(d), &cur); err != nil {
		t.Fatal(err)
	}
	zero := int32(0)
	cur.Spec.Replicas = &zero
	cur.Spec.Template.Annotations["ebb.dev/hosts"] = "shop.example.org"
	if err := c.Update(ctx, &cur); err != nil {
		t.Fatal(err)
	}
	testwait.Check(t, 10*time.Second, func() error {
		r, err := getRoute(ctx, c, ebbNames, ns, "shop")
		if err != nil {
			return err
		}
		if diff := cmp.Diff([]string{"shop.example.org"}, r.Spec.Hosts); diff != "" {
			return fmt.Errorf("hosts (-want +got):\n%s", diff)
		}
		return nil
	})

	// A bad annotation in the template shows on the route; the route stays.
	if err := c.Get(ctx, client.ObjectKeyFromObject(d), &cur); err != nil {
		t.Fatal(err)
	}
	cur.Spec.Template.Annotations["ebb.dev/hosts"] = "Bad_Host"
	if err := c.Update(ctx, &cur); err != nil {
		t.Fatal(err)
	}
	testwait.Check(t, 10*time.Second, func() error {
		return wantCondition(ctx, c, ns, "shop", routingv1alpha1.ConditionReady, metav1.ConditionFalse, "InvalidAnnotations")
	})

	// Opting the app out deletes the route.
	if err := c.Get(ctx, client.ObjectKeyFromObject(d), &cur); err != nil {
		t.Fatal(err)
	}
	delete(cur.Spec.Template.Labels, "ebb.dev/app")
	if err := c.Update(ctx, &cur); err != nil {
		t.Fatal(err)
	}
	testwait.Check(t, 10*time.Second, func() error {
		if _, err := getRoute(ctx, c, ebbNames, ns, "shop"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("AppRoute of an opted-out app: get = %v, want NotFound", err)
		}
		return nil
	})
}

func wantCondition(ctx context.Context, c client.Client, ns, name, typ string, status metav1.ConditionStatus, reason string) error {
	r, err := getRoute(ctx, c, ebbNames, ns, name)
	if err != nil {
		return err
	}
	cond := meta.FindStatusCondition(r.Status.Conditions, typ)
	if cond == nil || cond.Status != status || cond.Reason != reason {
		return fmt.Errorf("condition %s = %+v, want %s/%s", typ, cond, status, reason)
	}
	return nil
}

func TestTwoInstances(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	c, warned := newClient(t)
	makeNamespace(t, c, "only-ebb", map[string]string{"ebb.dev/inject": "enabled"})
	makeNamespace(t, c, "only-team1", map[string]string{"team1.example.com/inject": "enabled"})
	makeNamespace(t, c, "both", map[string]string{"ebb.dev/inject": "enabled", "team1.example.com/inject": "enabled"})
	labels := map[string]string{"ebb.dev/app": "two", "team1.example.com/app": "two"}
	ann := map[string]string{"ebb.dev/hosts": "two.ebb.example", "team1.example.com/hosts": "two.team1.example"}

	for _, tc := range []struct {
		ns         string
		mine       groupsuffix.Names
		other      groupsuffix.Names
		wantWarned bool
	}{
		{"only-ebb", ebbNames, t1Names, false},
		{"only-team1", t1Names, ebbNames, false},
	} {
		_, podTmpl := deploymentChain(t, c, tc.ns, "two", appTemplate(labels, ann), 1)
		pod, err := createPod(ctx, c, tc.ns, "two-1", podTmpl)
		if err != nil {
			t.Fatalf("%s: create pod: %v", tc.ns, err)
		}
		if sidecars(pod) != 1 || pod.Annotations[tc.mine.SidecarAnnotation()] == "" || pod.Annotations[tc.other.SidecarAnnotation()] != "" {
			t.Errorf("%s: %d sidecars, annotations %v; want one sidecar from %s", tc.ns, sidecars(pod), pod.Annotations, tc.mine.Suffix())
		}
		var r *routingv1alpha1.AppRoute
		testwait.Check(t, 10*time.Second, func() error {
			r, err = getRoute(ctx, c, tc.mine, tc.ns, "two")
			return err
		})
		if diff := cmp.Diff([]string{map[string]string{"ebb.dev": "two.ebb.example", "team1.example.com": "two.team1.example"}[tc.mine.Suffix()]}, r.Spec.Hosts); diff != "" {
			t.Errorf("%s: hosts (-want +got):\n%s", tc.ns, diff)
		}
		if _, err := getRoute(ctx, c, tc.other, tc.ns, "two"); !apierrors.IsNotFound(err) {
			t.Errorf("%s: AppRoute in %s: get = %v, want NotFound", tc.ns, tc.other.Group(), err)
		}
	}

	warned.take()
	pod, err := createPod(ctx, c, "both", "two", appTemplate(labels, ann))
	if err != nil {
		t.Fatalf("both: create pod: %v", err)
	}
	if n := sidecars(pod); n != 1 {
		t.Fatalf("namespace labelled for both: %d sidecars, want 1", n)
	}
	// The webhooks run in name order, so ebb.dev injects and team1 warns.
	var w []string
	for _, m := range warned.take() {
		if strings.Contains(m, "already has a container") {
			w = append(w, m)
		}
	}
	if diff := cmp.Diff([]string{`pod already has a container named "ebb-sidecar" (from another ebb instance?); team1.example.com leaves it alone and registers no route`}, w); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}
}

func TestSelfSignedSecretAndCABundle(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	c, _ := newClient(t)
	var s corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: "ebb-team1", Name: "ebb-webhook-tls"}, &s); err != nil {
		t.Fatalf("self-signed Secret: %v", err)
	}
	var mwc admissionregistrationv1.MutatingWebhookConfiguration
	if err := c.Get(ctx, client.ObjectKey{Name: "sidecar-injector.team1.example.com"}, &mwc); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(s.Data["ca.crt"]), string(mwc.Webhooks[0].ClientConfig.CABundle)); diff != "" {
		t.Errorf("caBundle is not the Secret's CA (-secret +caBundle):\n%s", diff)
	}
	if s.Type != corev1.SecretTypeTLS || len(s.Data["tls.crt"]) == 0 || len(s.Data["tls.key"]) == 0 || len(s.Data["ca.key"]) == 0 {
		t.Errorf("Secret type %s keys %v; want kubernetes.io/tls with tls.crt, tls.key, ca.crt, ca.key", s.Type, keysOf(s.Data))
	}
}

func keysOf(m map[string][]byte) []string {
	var k []string
	for key := range m {
		k = append(k, key)
	}
	return k
}

// TestBinary runs cmd/ebb-webhook as its own process (flags, kubeconfig,
// files-mode TLS) and stops it with SIGTERM.
func TestBinary(t *testing.T) {
	needEnv(t)
	dir := t.TempDir()
	bin, err := webhooktest.BuildWebhook(dir)
	if err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(dir, "webhook.log")
	p, err := webhooktest.StartProcess(env, bin, procNames.Suffix(), admissionregistrationv1.Fail, log, "--sidecar-image=registry.local/ebb-sidecar:bin")
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = p.Stop()
		}
	}()
	ctx := context.Background()
	c, _ := newClient(t)
	makeNamespace(t, c, "proc", map[string]string{"proc.example.com/inject": "enabled"})
	pod, err := createPod(ctx, c, "proc", "hello", appTemplate(map[string]string{"proc.example.com/app": "hello"}, nil))
	if err != nil {
		t.Fatalf("create pod: %v", err)
	}
	if sidecars(pod) != 1 || pod.Spec.InitContainers[0].Image != "registry.local/ebb-sidecar:bin" {
		t.Errorf("pod not injected with the flag's image: %+v", pod.Spec.InitContainers)
	}

	// Hot reload: a new certificate from a new CA replaces the files, the
	// caBundle follows, and the API server still reaches the webhook.
	fresh := &envtest.WebhookInstallOptions{LocalServingHost: "127.0.0.1"}
	if err := fresh.PrepWithoutInstalling(); err != nil {
		t.Fatal(err)
	}
	defer fresh.Cleanup()
	for _, f := range []string{"tls.key", "tls.crt"} {
		b, err := os.ReadFile(filepath.Join(fresh.LocalServingCertDir, f))
		if err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(p.Install.LocalServingCertDir, f+".new")
		if err := os.WriteFile(tmp, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(p.Install.LocalServingCertDir, f)); err != nil {
			t.Fatal(err)
		}
	}
	var mwc admissionregistrationv1.MutatingWebhookConfiguration
	if err := c.Get(ctx, client.ObjectKey{Name: "sidecar-injector.proc.example.com"}, &mwc); err != nil {
		t.Fatal(err)
	}
	mwc.Webhooks[0].ClientConfig.CABundle = fresh.LocalServingCAData
	if err := c.Update(ctx, &mwc); err != nil {
		t.Fatal(err)
	}
	testwait.Check(t, 30*time.Second, func() error {
		pod, err := createPod(ctx, c, "proc", "reloaded", appTemplate(map[string]string{"proc.example.com/app": "hello"}, nil), client.DryRunAll)
		if err != nil {
			return err
		}
		if sidecars(pod) != 1 {
			return errors.New("not injected")
		}
		return nil
	})

	stopped = true
	if err := p.Stop(); err != nil {
		b, _ := os.ReadFile(log)
		t.Errorf("ebb-webhook did not exit cleanly on SIGTERM: %v\n%s", err, b)
	}
}

// TestRouteLabelsFollowTheTemplate: the pod template's route-labels become
// the AppRoute's labels (activator pools select by them), a change of the
// annotation relabels the route, a label dropped from it is dropped from
// the route, and a label a user set by hand stays.
func TestRouteLabelsFollowTheTemplate(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	c, _ := newClient(t)
	ns := "route-labels"
	makeNamespace(t, c, ns, map[string]string{"ebb.dev/inject": "enabled"})
	d, _ := deploymentChain(t, c, ns, "tiered", appTemplate(map[string]string{"ebb.dev/app": "tiered"},
		map[string]string{"ebb.dev/route-labels": "tier=a,team=pay"}), 0)
	labelsAre := func(want map[string]string) {
		t.Helper()
		testwait.Check(t, 10*time.Second, func() error {
			r, err := getRoute(ctx, c, ebbNames, ns, "tiered")
			if err != nil {
				return err
			}
			if diff := cmp.Diff(want, r.Labels); diff != "" {
				return fmt.Errorf("AppRoute labels (-want +got):\n%s", diff)
			}
			return nil
		})
	}
	labelsAre(map[string]string{"ebb.dev/app": "tiered", "tier": "a", "team": "pay"})

	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(routingv1alpha1.GroupVersion(ebbNames.Group()).WithKind(routingv1alpha1.Kind))
	u.SetNamespace(ns)
	u.SetName("tiered")
	if err := c.Patch(ctx, u, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"owner":"me"}}}`))); err != nil {
		t.Fatal(err)
	}
	setAnnotation := func(v *string) {
		t.Helper()
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var cur appsv1.Deployment
			if err := c.Get(ctx, client.ObjectKeyFromObject(d), &cur); err != nil {
				return err
			}
			if v == nil {
				delete(cur.Spec.Template.Annotations, "ebb.dev/route-labels")
			} else {
				cur.Spec.Template.Annotations["ebb.dev/route-labels"] = *v
			}
			return c.Update(ctx, &cur)
		}); err != nil {
			t.Fatal(err)
		}
	}
	setAnnotation(ptr.To("tier=b"))
	labelsAre(map[string]string{"ebb.dev/app": "tiered", "tier": "b", "owner": "me"})
	setAnnotation(nil)
	labelsAre(map[string]string{"ebb.dev/app": "tiered", "owner": "me"})
}
