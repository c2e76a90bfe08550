package control

import (
	"testing"

	"k8s.io/client-go/rest"

	"github.com/ebb-dev/ebb/internal/kubeclient"
)

// TestLeaseClientOwnBucket: the pool Lease's renewals do not wait behind
// the activator's other clients (a burst of cold starts' status writes
// drained their shared bucket), at the flags' figures.
func TestLeaseClientOwnBucket(t *testing.T) {
	rc := &rest.Config{Host: "https://198.19.0.1:6443"}
	kubeclient.Limit(rc, 50, 100)
	kube, err := leaseClient(rc)
	if err != nil {
		t.Fatal(err)
	}
	for rc.RateLimiter.TryAccept() {
	}
	got := kube.CoordinationV1().RESTClient().GetRateLimiter()
	if got == rc.RateLimiter || got.QPS() != 50 || !got.TryAccept() {
		t.Errorf("the Lease's limiter %p (shared %p, QPS %v) waits behind the drained shared bucket; want one of its own at 50/s", got, rc.RateLimiter, got.QPS())
	}
}
