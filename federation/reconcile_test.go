package federation

import (
	"fmt"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/test/cluster"
	"github.com/ebb-dev/ebb/test/repo"
	"github.com/ebb-dev/ebb/webhook/webhooktest"
)

// memberEnv is one member cluster: a kube-apiserver with KEDA's
// ScaledObject API, the app's ScaledObject and its HPA.
type memberEnv struct {
	name string
	env  *envtest.Environment
	dyn  dynamic.Interface
	kube kubernetes.Interface
}

func startMember(t *testing.T, name string, crds ...string) *memberEnv {
	t.Helper()
	assets, err := webhooktest.Assets()
	if err != nil {
		t.Fatal(err)
	}
	env := &envtest.Environment{BinaryAssetsDirectory: assets, CRDDirectoryPaths: crds, ErrorIfCRDPathMissing: true}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start kube-apiserver of %s (envtest): %v", name, err)
	}
	t.Cleanup(func() { env.Stop() })
	m := &memberEnv{name: name, env: env}
	if m.dyn, err = dynamic.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if m.kube, err = kubernetes.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, err := m.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "app"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	so := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
		"metadata": map[string]any{"name": "hello", "namespace": "app"},
		"spec": map[string]any{
			"minReplicaCount": int64(0), "maxReplicaCount": int64(10),
			"scaleTargetRef": map[string]any{"name": "hello"},
			"triggers":       []any{map[string]any{"type": "external-push", "metadata": map[string]any{"app": "hello"}}},
		},
	}}
	if _, err := m.dyn.Resource(scaledObjects).Namespace("app").Create(ctx, so, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	hpa := &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: "keda-hpa-hello", Namespace: "app"},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "hello"},
			MinReplicas:    ptr.To[int32](1), MaxReplicas: 10,
		},
	}
	if _, err := m.kube.AutoscalingV2().HorizontalPodAutoscalers("app").Create(ctx, hpa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return m
}

// setHPA sets the member's HPA status: current and desired replicas,
// limited by its max when limited.
func (m *memberEnv) setHPA(t *testing.T, current, desired int32, limited bool) {
	t.Helper()
	hpa, err := m.kube.AutoscalingV2().HorizontalPodAutoscalers("app").Get(t.Context(), "keda-hpa-hello", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	status, reason := corev1.ConditionFalse, "DesiredWithinRange"
	if limited {
		status, reason = corev1.ConditionTrue, hpaTooMany
	}
	hpa.Status = autoscalingv2.HorizontalPodAutoscalerStatus{CurrentReplicas: current, DesiredReplicas: desired,
		Conditions: []autoscalingv2.HorizontalPodAutoscalerCondition{{Type: hpaConditionLimit, Status: status, Reason: reason, LastTransitionTime: metav1.Now()}}}
	if _, err := m.kube.AutoscalingV2().HorizontalPodAutoscalers("app").UpdateStatus(t.Context(), hpa, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// bounds is the member's ScaledObject's min and max.
func (m *memberEnv) bounds(t *testing.T) [2]int64 {
	t.Helper()
	so, err := m.dyn.Resource(scaledObjects).Namespace("app").Get(t.Context(), "hello", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	minR, _, _ := unstructured.NestedInt64(so.Object, "spec", "minReplicaCount")
	maxR, _, _ := unstructured.NestedInt64(so.Object, "spec", "maxReplicaCount")
	return [2]int64{minR, maxR}
}

// TestReconcile runs the controller's reconcile of one FederatedScale
// against two real member API servers (the hub is the first) through a
// sequence a user meets: the first split, headroom moving to a member at
// its max (lowered before the other is raised), a member that cannot be
// read (it keeps its bounds, the others are written, and no max is raised
// while its own should come down), and the object's deletion. Each step
// checks what the members' ScaledObjects hold, the status, the events and
// the metrics.
func TestReconcile(t *testing.T) {
	if testing.Short() {
		t.Skip("needs two kube-apiservers (envtest)")
	}
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	keda, err := cluster.ModuleDir("github.com/kedacore/keda/v2")
	if err != nil {
		t.Fatal(err)
	}
	kedaCRDs := filepath.Join(keda, "config", "crd", "bases", "keda.sh_scaledobjects.yaml")
	a := startMember(t, "a", kedaCRDs, filepath.Join(root, "config", "crd", "routing.ebb.dev_federatedscales.yaml"))
	b := startMember(t, "b", kedaCRDs)

	ctx := t.Context()
	names := groupsuffix.MustNew(groupsuffix.Default)
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := routingv1alpha1.AddToScheme(scheme, names.Group()); err != nil {
		t.Fatal(err)
	}
	hub, err := client.New(a.env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	if err := hub.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ebb-system"}}); err != nil {
		t.Fatal(err)
	}
	register := func(m *memberEnv, kubeconfig []byte) {
		t.Helper()
		s := &corev1.Secret{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"}, ObjectMeta: metav1.ObjectMeta{Name: "member-" + m.name, Namespace: "ebb-system", Labels: map[string]string{names.Key(MemberLabel): m.name}},
			Data: map[string][]byte{KubeconfigKey: kubeconfig}}
		err := hub.Create(ctx, s)
		if apierrors.IsAlreadyExists(err) {
			err = hub.Update(ctx, s) // unconditional: no resourceVersion
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	register(a, a.env.KubeConfig)
	register(b, b.env.KubeConfig)

	reg := prometheus.NewRegistry()
	met, err := newMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	rec := events.NewFakeRecorder(16)
	r := &reconciler{
		client: hub, names: names, namespace: "ebb-system", interval: time.Second,
		members: &members{byName: map[string]*member{}, timeout: 2 * time.Second},
		events:  rec, log: log.Log, metrics: met, trackers: map[client.ObjectKey]*tracker{},
	}
	fs := &routingv1alpha1.FederatedScale{
		TypeMeta:   metav1.TypeMeta{APIVersion: names.Group() + "/v1alpha1", Kind: routingv1alpha1.FederatedScaleKind},
		ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: "app"},
		Spec: routingv1alpha1.FederatedScaleSpec{
			ScaledObjectName: "hello", MinReplicas: 2, MaxReplicas: 10,
			Clusters:  []routingv1alpha1.FederatedCluster{{Name: "a"}, {Name: "b"}},
			Rebalance: routingv1alpha1.Rebalance{StabilizationSeconds: ptr.To[int32](0), UnreachableSeconds: ptr.To[int32](600)},
		},
	}
	if err := hub.Create(ctx, fs); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(fs)
	reconcile := func() routingv1alpha1.FederatedScaleStatus {
		t.Helper()
		res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key})
		if err != nil || res.RequeueAfter != time.Second {
			t.Fatalf("Reconcile = %+v, %v; want to come back after the interval", res, err)
		}
		var got routingv1alpha1.FederatedScale
		if err := hub.Get(ctx, key, &got); err != nil {
			t.Fatal(err)
		}
		return got.Status
	}
	cond := func(typ string, status metav1.ConditionStatus, reason, msg string, gen int64) metav1.Condition {
		return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: gen}
	}
	allRead := func(gen int64) metav1.Condition {
		return cond(routingv1alpha1.ConditionMembersReachable, metav1.ConditionTrue, "AllRead", "every member cluster was read", gen)
	}
	written := func(gen int64) metav1.Condition {
		return cond(routingv1alpha1.ConditionBoundsWritten, metav1.ConditionTrue, "Written", "every member read has its share", gen)
	}
	ignore := cmp.Options{
		cmpopts.IgnoreFields(metav1.Condition{}, "LastTransitionTime"),
		cmpopts.IgnoreFields(routingv1alpha1.FederatedScaleStatus{}, "LastMove"),
	}
	check := func(step string, got, want routingv1alpha1.FederatedScaleStatus, wantA, wantB [2]int64, wantEvents ...string) {
		t.Helper()
		if d := cmp.Diff(want, got, ignore); d != "" {
			t.Errorf("%s: status (-want +got):\n%s", step, d)
		}
		if got := a.bounds(t); got != wantA {
			t.Errorf("%s: a's ScaledObject min, max = %v, want %v", step, got, wantA)
		}
		if got := b.bounds(t); got != wantB {
			t.Errorf("%s: b's ScaledObject min, max = %v, want %v", step, got, wantB)
		}
		var gotEvents []string
		for len(rec.Events) > 0 {
			gotEvents = append(gotEvents, <-rec.Events)
		}
		if d := cmp.Diff(wantEvents, gotEvents, cmpopts.EquateEmpty()); d != "" {
			t.Errorf("%s: events (-want +got):\n%s", step, d)
		}
	}
	series := func(m prometheus.Collector, labels ...string) float64 {
		t.Helper()
		switch v := m.(type) {
		case *prometheus.CounterVec:
			return testutil.ToFloat64(v.WithLabelValues(labels...))
		case *prometheus.GaugeVec:
			return testutil.ToFloat64(v.WithLabelValues(labels...))
		}
		t.Fatalf("collector %T", m)
		return 0
	}

	// 1. The first split: by weight, both maxima come down from 10 to 5.
	clusterStatus := func(name string, minR, maxR int32) routingv1alpha1.FederatedClusterStatus {
		return routingv1alpha1.FederatedClusterStatus{Name: name, MinReplicas: minR, MaxReplicas: maxR, Reachable: true}
	}
	got := reconcile()
	check("first split", got, routingv1alpha1.FederatedScaleStatus{ObservedGeneration: 1,
		Clusters:   []routingv1alpha1.FederatedClusterStatus{clusterStatus("a", 1, 5), clusterStatus("b", 1, 5)},
		Conditions: []metav1.Condition{allRead(1), written(1)},
	}, [2]int64{1, 5}, [2]int64{1, 5})
	if w := series(met.writes, "app", "hello", "a") + series(met.writes, "app", "hello", "b"); w != 2 {
		t.Errorf("first split: %v writes counted, want 2", w)
	}

	// 2. b sits at its max (and its HPA would want more): a's unused
	// headroom moves to it, a lowered before b is raised.
	b.setHPA(t, 5, 5, true)
	got = reconcile()
	moved := "4 to b (at its max 5 for 0s)"
	atMax := clusterStatus("b", 1, 9)
	atMax.CurrentReplicas, atMax.DesiredReplicas, atMax.AtMax = 5, 5, true
	check("headroom moves", got, routingv1alpha1.FederatedScaleStatus{ObservedGeneration: 1, Replicas: 5,
		Clusters:        []routingv1alpha1.FederatedClusterStatus{clusterStatus("a", 1, 1), atMax},
		LastMoveMessage: "max headroom: " + moved,
		Conditions:      []metav1.Condition{allRead(1), written(1)},
	}, [2]int64{1, 1}, [2]int64{1, 9}, "Normal HeadroomMoved max headroom: "+moved)
	if got.LastMove == nil {
		t.Error("headroom moves: no lastMove")
	}
	if n := series(met.moves, "app", "hello"); n != 1 {
		t.Errorf("headroom moves: %v moves counted, want 1", n)
	}
	if got := series(met.maxShare, "app", "hello", "b"); got != 9 {
		t.Errorf("b's max share metric %v, want 9", got)
	}

	// 3. a cannot be read; the global max comes down to 6: b comes down
	// to its new share and is written; a keeps its bounds (it is still
	// within its unreachable window, so its share stands) and the
	// status says why.
	b.setHPA(t, 3, 3, false)
	register(a, unreachable(t, a.env.KubeConfig))
	setSpec := func(mod func(*routingv1alpha1.FederatedScaleSpec)) {
		t.Helper()
		var cur routingv1alpha1.FederatedScale
		if err := hub.Get(ctx, key, &cur); err != nil {
			t.Fatal(err)
		}
		mod(&cur.Spec)
		if err := hub.Update(ctx, &cur); err != nil {
			t.Fatal(err)
		}
	}
	setSpec(func(s *routingv1alpha1.FederatedScaleSpec) { s.MaxReplicas = 6 })
	got = reconcile()
	if len(got.Clusters) == 2 && strings.HasPrefix(got.Clusters[0].Message, "not read since ") {
		got.Clusters[0].Message = "not read since …"
	}
	unread := clusterStatus("a", 1, 3)
	unread.Message = "not read since …"
	b3 := clusterStatus("b", 1, 3)
	b3.CurrentReplicas, b3.DesiredReplicas = 3, 3
	notRead := cond(routingv1alpha1.ConditionMembersReachable, metav1.ConditionFalse, "NotRead", "", 2)
	if len(got.Conditions) > 0 && strings.HasPrefix(got.Conditions[0].Message, "not read: a (") {
		got.Conditions[0].Message = ""
	}
	check("a unread, max lowered", got, routingv1alpha1.FederatedScaleStatus{ObservedGeneration: 2, Replicas: 3,
		Clusters:        []routingv1alpha1.FederatedClusterStatus{unread, b3},
		LastMoveMessage: "max headroom: " + moved,
		Conditions:      []metav1.Condition{notRead, written(2)},
	}, [2]int64{1, 1}, [2]int64{1, 3})
	if got := series(met.reachable, "app", "hello", "a"); got != 1 {
		t.Errorf("a unread within its window: reachable metric %v, want 1", got)
	}

	// 4. The split changes so that a's max should come down (3 → 2) and
	// b's go up (3 → 6): a cannot be written, so b is not raised (the
	// maxima in force would add up to more than the global max).
	setSpec(func(s *routingv1alpha1.FederatedScaleSpec) {
		s.MaxReplicas = 8
		s.Clusters[1].Weight = 3
	})
	got = reconcile()
	if len(got.Clusters) == 2 && strings.HasPrefix(got.Clusters[0].Message, "not read since ") {
		got.Clusters[0].Message = "not read since …"
	}
	if len(got.Conditions) > 0 && strings.HasPrefix(got.Conditions[0].Message, "not read: a (") {
		got.Conditions[0].Message = ""
	}
	unread.MaxReplicas = 2
	b6 := b3
	b6.MaxReplicas = 6
	notRead.ObservedGeneration = 3
	check("a unread, its max due down", got, routingv1alpha1.FederatedScaleStatus{ObservedGeneration: 3, Replicas: 3,
		Clusters:        []routingv1alpha1.FederatedClusterStatus{unread, b6},
		LastMoveMessage: "max headroom: " + moved,
		Conditions:      []metav1.Condition{notRead, written(3)},
	}, [2]int64{1, 1}, [2]int64{1, 3})

	// 5. a answers again: it is written too.
	register(a, a.env.KubeConfig)
	got = reconcile()
	a2 := clusterStatus("a", 1, 2)
	check("a back", got, routingv1alpha1.FederatedScaleStatus{ObservedGeneration: 3, Replicas: 3,
		Clusters:        []routingv1alpha1.FederatedClusterStatus{a2, b6},
		LastMoveMessage: "max headroom: " + moved,
		Conditions:      []metav1.Condition{allRead(3), written(3)},
	}, [2]int64{1, 2}, [2]int64{1, 6})

	// 6. The split changes again, b's max to come down (6 → 4) and a's
	// to go up (2 → 5), but b's API server refuses the lowering: a is not
	// raised, and the condition says why.
	setSpec(func(s *routingv1alpha1.FederatedScaleSpec) {
		s.MaxReplicas = 9
		s.Clusters[1].Weight = 1
	})
	unrefuse := refuseMaxBelow(t, b, 6)
	got = reconcile()
	if len(got.Conditions) == 2 && strings.HasPrefix(got.Conditions[1].Message, "cluster b: write ScaledObject app/hello min 1 max 4: ") {
		got.Conditions[1].Message = ""
	}
	a5, b4 := clusterStatus("a", 1, 5), b6
	b4.MaxReplicas = 4
	check("b's lowering refused", got, routingv1alpha1.FederatedScaleStatus{ObservedGeneration: 4, Replicas: 3,
		Clusters:        []routingv1alpha1.FederatedClusterStatus{a5, b4},
		LastMoveMessage: "max headroom: " + moved,
		Conditions:      []metav1.Condition{allRead(4), cond(routingv1alpha1.ConditionBoundsWritten, metav1.ConditionFalse, "WriteFailed", "", 4)},
	}, [2]int64{1, 2}, [2]int64{1, 6})

	// 7. b takes it: b comes down, then a goes up, and the condition says
	// so (the condition was the status's only change: it was not written).
	unrefuse()
	got = reconcile()
	check("b takes it", got, routingv1alpha1.FederatedScaleStatus{ObservedGeneration: 4, Replicas: 3,
		Clusters:        []routingv1alpha1.FederatedClusterStatus{a5, b4},
		LastMoveMessage: "max headroom: " + moved,
		Conditions:      []metav1.Condition{allRead(4), written(4)},
	}, [2]int64{1, 5}, [2]int64{1, 4})

	// 8. Deleted: forgotten, its series gone.
	if err := hub.Delete(ctx, fs); err != nil {
		t.Fatal(err)
	}
	if res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key}); err != nil || res != (ctrl.Result{}) {
		t.Errorf("Reconcile of a deleted FederatedScale = %+v, %v; want nothing more to do", res, err)
	}
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 0 {
		t.Errorf("after deletion: %d series (%v), want none", n, err)
	}
	if len(r.trackers) != 0 {
		t.Errorf("after deletion: %d trackers kept", len(r.trackers))
	}
}

// unreachable is kubeconfig with its servers at a port nothing listens on.
func unreachable(t *testing.T, kubeconfig []byte) []byte {
	t.Helper()
	c, err := clientcmd.Load(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, cl := range c.Clusters {
		cl.Server = "https://127.0.0.1:1"
	}
	b, err := clientcmd.Write(*c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// refuseMaxBelow makes m's API server refuse a ScaledObject whose max is
// below n (a ValidatingAdmissionPolicy), until the function it returns is
// called.
func refuseMaxBelow(t *testing.T, m *memberEnv, n int) func() {
	t.Helper()
	ctx := t.Context()
	name := "refuse-max-below"
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{"keda.sh"}, APIVersions: []string{"v1alpha1"}, Resources: []string{"scaledobjects"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{Expression: fmt.Sprintf("object.spec.maxReplicaCount >= %d", n), Message: "refused by the test"}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}},
	}
	ar := m.kube.AdmissionregistrationV1()
	if _, err := ar.ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := ar.ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The API server enforces a policy once it has loaded it: wait until
	// a dry run of the write is refused, then until it is taken again.
	refused := func() bool {
		t.Helper()
		patch := fmt.Sprintf(`{"apiVersion":"keda.sh/v1alpha1","kind":"ScaledObject","metadata":{"name":"hello","namespace":"app"},"spec":{"maxReplicaCount":%d}}`, n-1)
		_, err := m.dyn.Resource(scaledObjects).Namespace("app").Patch(ctx, "hello", types.ApplyPatchType, []byte(patch),
			metav1.PatchOptions{FieldManager: "test", Force: ptr.To(true), DryRun: []string{metav1.DryRunAll}})
		if err != nil && !strings.Contains(err.Error(), "refused by the test") {
			t.Fatalf("dry run on %s: %v", m.name, err)
		}
		return err != nil
	}
	wait := func(want bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); refused() != want; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s's API server: refusal %v after 10 s, want %v", m.name, !want, want)
			}
		}
	}
	wait(true)
	return func() {
		t.Helper()
		if err := ar.ValidatingAdmissionPolicyBindings().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := ar.ValidatingAdmissionPolicies().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		wait(false)
	}
}
