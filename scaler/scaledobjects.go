package scaler

import (
	"context"
	"slices"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
)

// scaledObject is what the scaler keeps of a KEDA ScaledObject: whether
// KEDA holds it active (its Active condition) and its triggers' types,
// with the app of the external ones. The transform drops the rest, so the
// cache of a fleet's ScaledObjects is a few hundred bytes each.
type scaledObject struct {
	metav1.TypeMeta
	metav1.ObjectMeta // Name, Namespace, ResourceVersion only

	active   bool
	triggers []soTrigger
}

type soTrigger struct {
	typ string
	app string // metadata.app of an external or external-push trigger
}

// DeepCopyObject makes scaledObject a runtime.Object for the informer's
// store.
func (o *scaledObject) DeepCopyObject() runtime.Object {
	out := &scaledObject{TypeMeta: o.TypeMeta, active: o.active, triggers: slices.Clone(o.triggers)}
	o.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return out
}

func slimScaledObject(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	o := &scaledObject{ObjectMeta: metav1.ObjectMeta{Name: u.GetName(), Namespace: u.GetNamespace(), ResourceVersion: u.GetResourceVersion(), UID: u.GetUID()}}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == "Active" {
			o.active = m["status"] == string(metav1.ConditionTrue)
		}
	}
	triggers, _, _ := unstructured.NestedSlice(u.Object, "spec", "triggers")
	for _, t := range triggers {
		m, ok := t.(map[string]any)
		if !ok {
			continue
		}
		tr := soTrigger{}
		tr.typ, _ = m["type"].(string)
		if md, ok := m["metadata"].(map[string]any); ok && isExternal(tr.typ) {
			tr.app, _ = md[MetaApp].(string)
		}
		o.triggers = append(o.triggers, tr)
	}
	return o, nil
}

func isExternal(typ string) bool { return typ == "external" || typ == "external-push" }

// scaledObjects watches KEDA's ScaledObjects, in every namespace, to tell
// an app kept up by another trigger of its ScaledObject (KEDA's cron for
// warm hours) from one that nothing keeps up, in its Idle condition. One
// list at start and one watch, re-opened every few minutes: KEDA writes a
// ScaledObject's status when its activity changes (and its lastActiveTime
// while active), so an idle fleet's ScaledObjects send nothing, and the
// scaler itself never writes them.
type scaledObjectCache struct {
	inf cache.SharedIndexInformer
}

func newScaledObjectCache(dyn dynamic.Interface) *scaledObjectCache {
	inf := dynamicinformer.NewFilteredDynamicInformer(dyn, scaledObjects, metav1.NamespaceAll, 0, cache.Indexers{}, nil).Informer()
	_ = inf.SetTransform(slimScaledObject) // fails only once started
	return &scaledObjectCache{inf: inf}
}

// run watches until ctx ends. Without KEDA's CRD, or without the right to
// list ScaledObjects, the informer retries with its back-off and the Idle
// condition never says KeptUpByAnotherTrigger: nothing else depends on it.
func (c *scaledObjectCache) run(ctx context.Context) { c.inf.Run(ctx.Done()) }

// otherTrigger is a ScaledObject that KEDA holds active through triggers
// other than ebb's for the app.
type otherTrigger struct {
	scaledObject string
	types        []string // sorted, each once
}

// otherTrigger returns the ScaledObject that asked about p, when KEDA holds
// it active and it has triggers other than ebb's for p's app; nil
// otherwise (no such ScaledObject cached, inactive, or ebb's the only
// trigger). Only the Idle condition reads it: when ebb's trigger is
// inactive, KEDA's Active condition is then another trigger's doing.
func (c *scaledObjectCache) otherTrigger(p params) *otherTrigger {
	if c == nil || p.scaledObject == "" {
		return nil
	}
	obj, ok, _ := c.inf.GetIndexer().GetByKey(p.app.Namespace + "/" + p.scaledObject)
	if !ok {
		return nil
	}
	o, _ := obj.(*scaledObject)
	if o == nil || !o.active {
		return nil
	}
	var types []string
	for _, t := range o.triggers {
		if isExternal(t.typ) && t.app == p.app.Name {
			continue
		}
		if !slices.Contains(types, t.typ) {
			types = append(types, t.typ)
		}
	}
	if len(types) == 0 {
		return nil
	}
	sort.Strings(types)
	return &otherTrigger{scaledObject: o.Name, types: types}
}
