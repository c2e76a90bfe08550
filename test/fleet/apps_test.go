package fleet

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// A namespace whose delete fails does not keep Delete from deleting the
// others, and is named in its error.
func TestDeleteDeletesEveryNamespaceDespiteAFailure(t *testing.T) {
	names := []string{"f-00", "f-01", "f-02"}
	var objs []runtime.Object
	for _, ns := range names {
		objs = append(objs, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	client := fake.NewClientset(objs...)
	client.PrependReactor("delete", "namespaces", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.DeleteAction).GetName() == "f-00" {
			return true, nil, errors.New("refused")
		}
		return false, nil, nil
	})
	f := &Fleet{Client: client, Namespaces: names}
	err := f.Delete(context.Background(), 5*time.Second)
	if err == nil || !strings.Contains(err.Error(), "delete namespace f-00: refused") {
		t.Errorf("Delete: %v, want the failure of f-00", err)
	}
	for _, ns := range names[1:] {
		if _, err := client.CoreV1().Namespaces().Get(context.Background(), ns, metav1.GetOptions{}); err == nil {
			t.Errorf("namespace %s not deleted", ns)
		}
	}
}
