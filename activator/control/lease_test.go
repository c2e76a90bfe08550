package control

import (
	"net"
	"testing"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/webhook/webhooktest"
)

// A replica deletes the activators' Lease only when the pod of the Lease's
// holder, not itself, is deleted or not Ready (its process crashed or
// hangs), and then campaigns again at once; a tombstone counts as a deleted
// pod. Run against a real kube-apiserver (envtest, KUBEBUILDER_ASSETS).
func TestReleaseIfHolderCannotServe(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a kube-apiserver (envtest; make test-integration runs it)")
	}
	names, err := groupsuffix.New("ebb.dev")
	if err != nil {
		t.Fatal(err)
	}
	assets, err := webhooktest.Assets()
	if err != nil {
		t.Fatal(err)
	}
	env := &envtest.Environment{BinaryAssetsDirectory: assets}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start kube-apiserver (envtest): %v", err)
	}
	t.Cleanup(func() { env.Stop() })
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ebb-system"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c := Config{Names: names, PodName: "act-b", PodNamespace: "ebb-system", Pool: DefaultPool}
	pod := func(name string, ready bool) *corev1.Pod {
		status := corev1.ConditionFalse
		if ready {
			status = corev1.ConditionTrue
		}
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ebb-system"},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}}}
	}
	for name, tc := range map[string]struct {
		holder  string
		obj     any
		deleted bool
		gone    bool
	}{
		"the holder's pod is deleted":            {holder: "act-a", obj: pod("act-a", true), deleted: true, gone: true},
		"a tombstone of the holder":              {holder: "act-a", obj: cache.DeletedFinalStateUnknown{Key: "ebb-system/act-a", Obj: pod("act-a", true)}, gone: true},
		"the holder's pod turns not ready":       {holder: "act-a", obj: pod("act-a", false), gone: true},
		"the holder's pod is ready":              {holder: "act-a", obj: pod("act-a", true)},
		"another pod is deleted":                 {holder: "act-a", obj: pod("act-c", true), deleted: true},
		"another pod turns not ready":            {holder: "act-a", obj: pod("act-c", false)},
		"its own pod (it is the holder) deleted": {holder: "act-b", obj: pod("act-b", false), deleted: true},
		"not a pod":                              {holder: "act-a", obj: "act-a", deleted: true},
	} {
		t.Run(name, func(t *testing.T) {
			lease := &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: names.ClusterScopedName("activator"), Namespace: "ebb-system"},
				Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(tc.holder)},
			}
			leases := kube.CoordinationV1().Leases("ebb-system")
			if _, err := leases.Create(t.Context(), lease, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			defer leases.Delete(t.Context(), lease.Name, metav1.DeleteOptions{})
			l := &leadership{kube: kube, cfg: c, log: logr.Discard(), retry: make(chan struct{}, 1)}
			l.releaseIfHolderCannotServe(t.Context(), tc.obj, tc.deleted)
			_, err := leases.Get(t.Context(), lease.Name, metav1.GetOptions{})
			if gone := apierrors.IsNotFound(err); gone != tc.gone || (err != nil && !gone) {
				t.Fatalf("Lease deleted = %v (err %v), want %v", gone, err, tc.gone)
			}
			if retry := len(l.retry) == 1; retry != tc.gone {
				t.Errorf("campaign again at once = %v, want %v", retry, tc.gone)
			}
		})
	}
}

// TestRefused: a port nothing listens on refuses; a listening one does not.
func TestRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if refused(addr) {
		t.Errorf("%s listens, yet refused", addr)
	}
	ln.Close()
	if !refused(addr) {
		t.Errorf("%s closed, yet not refused", addr)
	}
}
