package control

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// view is what a replica knows when it decides.
type view struct {
	// self is this replica's pod name; holder the Lease's holder as last
	// observed ("" none), leading whether this replica holds it.
	self, holder string
	leading      bool
	// pods are the pool's activator pods as the API server has them
	// (the informer's cache).
	pods []corev1.Pod
}

// decision is what the replica does about the Lease, and what the
// hand-off slices list.
type decision struct {
	// campaign: run for the Lease (or keep it): this replica can serve.
	campaign bool
	// stepDown: this replica leads but cannot serve, or the Lease is
	// another's: end the term.
	stepDown bool
	// release names the holder whose Lease this replica deletes (it cannot
	// serve, or its pod is gone), "" none; why says why it releases or
	// steps down.
	release, why string
	// listed are the pods the hand-off slices list, by name, sorted.
	listed []string
}

// decide is the leadership protocol and the slices' membership, in one
// place; the package doc gives the safety argument it follows.
func decide(v view) decision {
	var d decision
	self, found := -1, map[string]int{}
	for i := range v.pods {
		p := &v.pods[i]
		found[p.Name] = i
		if p.Name == v.self {
			self = i
		}
		if ok, _ := canServe(p); ok && p.Status.PodIP != "" && !strings.Contains(p.Status.PodIP, ":") {
			d.listed = append(d.listed, p.Name)
		}
	}
	slices.Sort(d.listed)
	// A replica that does not find its pod among the pool's (not run in a
	// pod, as in a developer's run) counts as able to serve, and knows too
	// little of the pool to release anyone's Lease.
	selfServes := self < 0
	if self >= 0 {
		selfServes, _ = canServe(&v.pods[self])
	}
	d.campaign = selfServes
	if v.leading && !selfServes {
		d.stepDown, d.why = true, "this replica cannot serve"
		return d
	}
	if v.leading && v.holder != "" && v.holder != v.self {
		// The election read another holder (it released this one's
		// Lease and took it): its writes are the slices' now.
		d.stepDown, d.why = true, "another replica holds the Lease"
		return d
	}
	if !selfServes || self < 0 || v.leading || v.holder == "" || v.holder == v.self {
		return d
	}
	i, ok := found[v.holder]
	if !ok {
		d.release, d.why = v.holder, "its pod is gone"
		return d
	}
	if ok, why := canServe(&v.pods[i]); !ok {
		d.release, d.why = v.holder, why
	}
	return d
}

// canServe is the kubelet's word on an activator pod, as the API server
// has it: not being deleted, Running, Ready, and every container running
// and ready. It says why not.
func canServe(p *corev1.Pod) (bool, string) {
	switch {
	case p.DeletionTimestamp != nil:
		return false, "its pod is being deleted"
	case p.Status.Phase != corev1.PodRunning:
		return false, "its pod is " + strings.ToLower(string(p.Status.Phase))
	case !podReady(p):
		return false, "its pod is not ready"
	}
	for _, c := range p.Status.ContainerStatuses {
		if c.State.Running == nil {
			return false, "its container " + c.Name + " is not running"
		}
		if !c.Ready {
			return false, "its container " + c.Name + " is not ready"
		}
	}
	return true, ""
}

// podReady reports whether p is Running with its Ready condition true.
func podReady(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
