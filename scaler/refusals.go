package scaler

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
)

// scaledObjects is KEDA's ScaledObject resource.
var scaledObjects = schema.GroupVersionResource{Group: "keda.sh", Version: "v1alpha1", Resource: "scaledobjects"}

// refusalEvery is how often one refusal of one ScaledObject is reported
// again while KEDA keeps asking.
const refusalEvery = 5 * time.Minute

// refusals tells the ScaledObject's owner why the scaler refused it: KEDA
// v2.21 only logs what an external scaler answers (its own events about it
// are refused by the API server), so the scaler posts a Warning event
// ScalerRefused on the ScaledObject itself (kubectl describe scaledobject).
type refusals struct {
	kube kubernetes.Interface
	dyn  dynamic.Interface // nil: no events (tests with a fake clientset)
	log  logr.Logger

	every onceEvery // keyed namespace/name/message
}

func newRefusals(kube kubernetes.Interface, dyn dynamic.Interface, log logr.Logger) *refusals {
	return &refusals{kube: kube, dyn: dyn, log: log}
}

// onceEvery lets one report per key through every refusalEvery; its memory
// is bounded (past 10,000 keys it forgets them all).
type onceEvery struct {
	mu   sync.Mutex
	last map[string]time.Time
}

// allow reports whether a report for key may go out at now, and if so
// records it.
func (o *onceEvery) allow(key string, now time.Time) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if t, ok := o.last[key]; ok && now.Sub(t) < refusalEvery {
		return false
	}
	if o.last == nil || len(o.last) > 10_000 {
		o.last = map[string]time.Time{}
	}
	o.last[key] = now
	return true
}

// report posts err, if it is a refusal (InvalidArgument), on ref's
// ScaledObject, at most once per refusalEvery; it does not block.
func (r *refusals) report(ref *externalscaler.ScaledObjectRef, err error) {
	if r == nil || r.dyn == nil || status.Code(err) != codes.InvalidArgument || ref.GetName() == "" || ref.GetNamespace() == "" {
		return
	}
	msg := status.Convert(err).Message()
	key := ref.GetNamespace() + "/" + ref.GetName() + "/" + msg
	now := time.Now()
	if !r.every.allow(key, now) {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := r.post(ctx, ref.GetNamespace(), ref.GetName(), msg, now); err != nil {
			r.log.V(1).Info("cannot post the refusal on the ScaledObject", "namespace", ref.GetNamespace(), "name", ref.GetName(), "err", err.Error())
		}
	}()
}

func (r *refusals) post(ctx context.Context, ns, name, msg string, now time.Time) error {
	so, err := r.dyn.Resource(scaledObjects).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get ScaledObject: %w", err)
	}
	if len(msg) > 1024 {
		msg = msg[:1021] + "..."
	}
	host, _ := os.Hostname()
	ev := &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: name + ".ebb-", Namespace: ns},
		EventTime:  metav1.NewMicroTime(now),
		Regarding: corev1.ObjectReference{APIVersion: scaledObjects.GroupVersion().String(), Kind: "ScaledObject",
			Namespace: ns, Name: name, UID: so.GetUID(), ResourceVersion: so.GetResourceVersion()},
		Type: corev1.EventTypeWarning, Reason: "ScalerRefused", Action: "Scale", Note: msg,
		ReportingController: "ebb-scaler", ReportingInstance: host,
	}
	_, err = r.kube.EventsV1().Events(ns).Create(ctx, ev, metav1.CreateOptions{})
	return err
}
