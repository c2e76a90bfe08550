package webhook

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/ebb-dev/ebb/internal/groupsuffix"
)

// TestWorkloadsListedWhileAKindSyncs: a listed kind whose informer is
// still starting (its CRD has just come) leaves the other kinds listed,
// not an error. The list feeds map functions, such as the one of a
// namespace newly labelled for injection, that cannot retry: its apps
// were never routed when the namespace was labelled in the few
// milliseconds of the Worker informer's first list (make test's
// TestRoutesWhenNamespaceLabelled, once TestWorkerCRDAppearsLater had
// installed the Worker CRD just before).
func TestWorkloadsListedWhileAKindSyncs(t *testing.T) {
	names := groupsuffix.MustNew(groupsuffix.Default)
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "late", Namespace: "zero-late"},
		Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{names.AppLabel(): "late"}}}}}
	c := fake.NewClientBuilder().WithObjects(d).Build()
	syncing := &optionalAPI{installed: true, synced: func(context.Context) bool { return false }, what: "workers.example.com"}
	w := &workloads{names: names, client: c, cache: c,
		custom: []*customKind{{gr: schema.GroupResource{Group: "example.com", Resource: "workers"}, api: syncing}}}
	got, err := w.list(context.Background(), "zero-late", "")
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	if len(got) != 1 || got[0].Object.GetName() != "late" {
		t.Fatalf("listed %d workloads, want the Deployment late", len(got))
	}
}
