package webhook

import "testing"

// TestLeaseTimings: the leader gives up its term (leaseRenewDeadline, its
// last renewal started within leaseRetry of it) before another replica may
// take the Lease (leaseDuration), with a margin.
func TestLeaseTimings(t *testing.T) {
	if leaseRenewDeadline+leaseRetry >= leaseDuration {
		t.Errorf("renew deadline %s + retry %s ≥ lease duration %s: no margin between the leader giving up and another taking over",
			leaseRenewDeadline, leaseRetry, leaseDuration)
	}
}
