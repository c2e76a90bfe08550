package federation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// scaledObjects is KEDA's ScaledObject resource.
var scaledObjects = schema.GroupVersionResource{Group: "keda.sh", Version: "v1alpha1", Resource: "scaledobjects"}

// FieldManager owns spec.minReplicaCount and spec.maxReplicaCount of the
// members' ScaledObjects (server-side apply).
const FieldManager = "ebb-federation"

// Secret keys and metadata of a member cluster's registration: a Secret in
// the controller's namespace labelled <suffix>/member-cluster=<name> with
// its kubeconfig under "kubeconfig", optionally annotated
// <suffix>/scaler-service=<namespace>/<service>:<port> to read the app's
// request figures from the member's ebb scaler (through the member's API
// server's service proxy).
const (
	MemberLabel       = "member-cluster"
	ScalerAnnotation  = "scaler-service"
	KubeconfigKey     = "kubeconfig"
	hpaConditionLimit = autoscalingv2.ScalingLimited
	hpaTooMany        = "TooManyReplicas"
)

// member is a registered member cluster's clients.
type member struct {
	name            string
	resourceVersion string // of its Secret: clients are rebuilt when it changes
	dyn             dynamic.Interface
	kube            kubernetes.Interface
	scaler          *scalerService
}

type scalerService struct{ namespace, name, port string }

func parseScalerService(s string) (*scalerService, error) {
	ns, rest, ok := strings.Cut(s, "/")
	name, port, ok2 := strings.Cut(rest, ":")
	if !ok || !ok2 || ns == "" || name == "" || port == "" {
		return nil, fmt.Errorf("%q: want <namespace>/<service>:<port>", s)
	}
	return &scalerService{ns, name, port}, nil
}

// members keeps one member per registration Secret.
type members struct {
	mu      sync.Mutex
	byName  map[string]*member
	timeout time.Duration
}

// get returns the member registered as name in secrets, its clients
// rebuilt when its Secret changed, or the error that keeps it unusable.
func (ms *members) get(secrets []corev1.Secret, label, annotation, name string) (*member, error) {
	var found []corev1.Secret
	for _, s := range secrets {
		if s.Labels[label] == name {
			found = append(found, s)
		}
	}
	switch len(found) {
	case 0:
		return nil, fmt.Errorf("no Secret labelled %s=%s in the controller's namespace", label, name)
	case 1:
	default:
		return nil, fmt.Errorf("%d Secrets labelled %s=%s in the controller's namespace (%s, %s): want one", len(found), label, name, found[0].Name, found[1].Name)
	}
	s := found[0]
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if m := ms.byName[name]; m != nil && m.resourceVersion == s.ResourceVersion {
		return m, nil
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(s.Data[KubeconfigKey])
	if err != nil {
		return nil, fmt.Errorf("secret %s: key %q: %w", s.Name, KubeconfigKey, err)
	}
	cfg.Timeout = ms.timeout
	cfg.QPS, cfg.Burst = 20, 40
	cfg.UserAgent = FieldManager
	m := &member{name: name, resourceVersion: s.ResourceVersion}
	if m.dyn, err = dynamic.NewForConfig(cfg); err != nil {
		return nil, fmt.Errorf("secret %s: %w", s.Name, err)
	}
	if m.kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, fmt.Errorf("secret %s: %w", s.Name, err)
	}
	if a := s.Annotations[annotation]; a != "" {
		if m.scaler, err = parseScalerService(a); err != nil {
			return nil, fmt.Errorf("secret %s: annotation %s: %w", s.Name, annotation, err)
		}
	}
	ms.byName[name] = m
	return m, nil
}

// picture is what one read of a member found.
type picture struct {
	soMin, soMax      int32
	current, desired  int32
	limited           bool // the HPA wants more than its max
	hasLimitCondition bool
	requests          *int64
}

// read takes the member's local picture of the app: its ScaledObject's
// bounds, its HPA's replicas, and (when registered) the app's requests from
// the member's ebb scaler. A missing HPA reads as 0 replicas (KEDA has not
// made it yet); the scaler's figures are best effort.
func (m *member) read(ctx context.Context, namespace, scaledObject string) (picture, error) {
	var p picture
	so, err := m.dyn.Resource(scaledObjects).Namespace(namespace).Get(ctx, scaledObject, metav1.GetOptions{})
	if err != nil {
		return p, fmt.Errorf("read ScaledObject %s/%s: %w", namespace, scaledObject, err)
	}
	minR, _, _ := unstructured.NestedInt64(so.Object, "spec", "minReplicaCount")
	maxR, found, _ := unstructured.NestedInt64(so.Object, "spec", "maxReplicaCount")
	if !found {
		maxR = 100 // KEDA's default
	}
	p.soMin, p.soMax = int32(minR), int32(maxR)
	hpaName, _, _ := unstructured.NestedString(so.Object, "status", "hpaName")
	if hpaName == "" {
		hpaName = "keda-hpa-" + scaledObject
	}
	hpa, err := m.kube.AutoscalingV2().HorizontalPodAutoscalers(namespace).Get(ctx, hpaName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return p, fmt.Errorf("read HPA %s/%s: %w", namespace, hpaName, err)
	default:
		p.current, p.desired = hpa.Status.CurrentReplicas, hpa.Status.DesiredReplicas
		for _, c := range hpa.Status.Conditions {
			if c.Type == hpaConditionLimit {
				p.hasLimitCondition = true
				p.limited = c.Status == corev1.ConditionTrue && c.Reason == hpaTooMany
			}
		}
	}
	if m.scaler != nil {
		p.requests = m.requests(ctx, namespace, appOf(so))
	}
	return p, nil
}

// appOf is the ebb app a ScaledObject scales: its ebb trigger's "app",
// else its scale target's name.
func appOf(so *unstructured.Unstructured) string {
	triggers, _, _ := unstructured.NestedSlice(so.Object, "spec", "triggers")
	for _, t := range triggers {
		if tm, ok := t.(map[string]any); ok {
			if app, _, _ := unstructured.NestedString(tm, "metadata", "app"); app != "" {
				return app
			}
		}
	}
	name, _, _ := unstructured.NestedString(so.Object, "spec", "scaleTargetRef", "name")
	return name
}

// requests asks the member's ebb scaler, through the member API server's
// service proxy, for the app's requests in flight and held; nil when it
// cannot say.
func (m *member) requests(ctx context.Context, namespace, app string) *int64 {
	body, err := m.kube.CoreV1().Services(m.scaler.namespace).ProxyGet("", m.scaler.name, m.scaler.port, "apps/"+namespace+"/"+app, nil).DoRaw(ctx)
	var zero int64
	if se := (*apierrors.StatusError)(nil); errors.As(err, &se) && se.ErrStatus.Code == 404 {
		return &zero // the scaler has nothing for the app
	}
	if err != nil {
		return nil
	}
	var st struct {
		Concurrency int64 `json:"concurrency"`
	}
	if json.Unmarshal(body, &st) != nil {
		return nil
	}
	return &st.Concurrency
}

// write gives the member's ScaledObject its share: a server-side apply of
// the two fields only, which the controller owns from then on.
func (m *member) write(ctx context.Context, namespace, scaledObject string, s Share) error {
	patch, err := json.Marshal(map[string]any{
		"apiVersion": scaledObjects.GroupVersion().String(), "kind": "ScaledObject",
		"metadata": map[string]any{"name": scaledObject, "namespace": namespace},
		"spec":     map[string]any{"minReplicaCount": s.Min, "maxReplicaCount": s.Max},
	})
	if err != nil {
		return fmt.Errorf("encode ScaledObject patch: %w", err)
	}
	force := true
	_, err = m.dyn.Resource(scaledObjects).Namespace(namespace).Patch(ctx, scaledObject, types.ApplyPatchType, patch,
		metav1.PatchOptions{FieldManager: FieldManager, Force: &force})
	if err != nil {
		return fmt.Errorf("write ScaledObject %s/%s min %d max %d: %w", namespace, scaledObject, s.Min, s.Max, err)
	}
	return nil
}
