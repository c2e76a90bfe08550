package control

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// activatorPod is a pod of the pool as the kubelet reports a healthy one
// (Running, Ready, its container running and ready), changed by mods.
func activatorPod(name, ip string, mods ...func(*corev1.Pod)) corev1.Pod {
	p := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ebb-system"},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning, PodIP: ip,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "activator", Ready: true,
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}},
		},
	}
	for _, m := range mods {
		m(&p)
	}
	return p
}

func notReady(p *corev1.Pod) { p.Status.Conditions[0].Status = corev1.ConditionFalse }

// deleting: the pod is being deleted (a finalizer, as the fake client
// wants one, keeps it).
func deleting(p *corev1.Pod) {
	p.DeletionTimestamp, p.Finalizers = &metav1.Time{}, []string{"test"}
}

// exited: the kubelet saw the container's process exit (its relist), and
// this status is the one it wrote then, before the Ready condition's
// turn, as a status written in between would have it.
func exited(p *corev1.Pod) {
	p.Status.ContainerStatuses[0].Ready = false
	p.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "Error"}}
}

func crashLooping(p *corev1.Pod) {
	notReady(p)
	p.Status.ContainerStatuses[0].Ready = false
	p.Status.ContainerStatuses[0].RestartCount = 4
	p.Status.ContainerStatuses[0].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}
}

// TestDecide: the leadership protocol's and the slices' every decision,
// from the API server's word on the pool's pods. A replica's view has no
// field for what it sees of another over the network: no refusal, timeout
// or partition can take an activator out of the slices or its Lease away.
func TestDecide(t *testing.T) {
	a, b := activatorPod("act-a", "10.0.0.1"), activatorPod("act-b", "10.0.0.2")
	for _, tc := range []struct {
		name string
		v    view
		want decision
	}{
		{"both serve, no holder: campaign, both listed",
			view{self: "act-b", pods: []corev1.Pod{a, b}},
			decision{campaign: true, listed: []string{"act-a", "act-b"}}},
		{"both serve, the other holds the Lease: campaign (wait), nothing released",
			view{self: "act-b", holder: "act-a", pods: []corev1.Pod{a, b}},
			decision{campaign: true, listed: []string{"act-a", "act-b"}}},
		{"this replica leads and serves: keep the Lease",
			view{self: "act-b", holder: "act-b", leading: true, pods: []corev1.Pod{a, b}},
			decision{campaign: true, listed: []string{"act-a", "act-b"}}},
		{"this replica is not ready: no campaign, not listed",
			view{self: "act-b", holder: "act-a", pods: []corev1.Pod{a, activatorPod("act-b", "10.0.0.2", notReady)}},
			decision{listed: []string{"act-a"}}},
		{"this replica leads but is not ready: step down",
			view{self: "act-b", holder: "act-b", leading: true, pods: []corev1.Pod{a, activatorPod("act-b", "10.0.0.2", notReady)}},
			decision{stepDown: true, why: "this replica cannot serve", listed: []string{"act-a"}}},
		{"this replica leads and is being deleted: step down",
			view{self: "act-b", holder: "act-b", leading: true, pods: []corev1.Pod{a, activatorPod("act-b", "10.0.0.2", deleting)}},
			decision{stepDown: true, why: "this replica cannot serve", listed: []string{"act-a"}}},
		{"this replica leads but the election read another holder: step down at once",
			view{self: "act-b", holder: "act-a", leading: true, pods: []corev1.Pod{a, b}},
			decision{campaign: true, stepDown: true, why: "another replica holds the Lease", listed: []string{"act-a", "act-b"}}},
		{"the holder's pod is gone: release it",
			view{self: "act-b", holder: "act-a", pods: []corev1.Pod{b}},
			decision{campaign: true, release: "act-a", why: "its pod is gone", listed: []string{"act-b"}}},
		{"the holder's pod is not ready: release it",
			view{self: "act-b", holder: "act-a", pods: []corev1.Pod{activatorPod("act-a", "10.0.0.1", notReady), b}},
			decision{campaign: true, release: "act-a", why: "its pod is not ready", listed: []string{"act-b"}}},
		{"the holder's process exited (the kubelet's relist): release it",
			view{self: "act-b", holder: "act-a", pods: []corev1.Pod{activatorPod("act-a", "10.0.0.1", exited), b}},
			decision{campaign: true, release: "act-a", why: "its container activator is not running", listed: []string{"act-b"}}},
		{"the holder crash-loops: release it",
			view{self: "act-b", holder: "act-a", pods: []corev1.Pod{activatorPod("act-a", "10.0.0.1", crashLooping), b}},
			decision{campaign: true, release: "act-a", why: "its pod is not ready", listed: []string{"act-b"}}},
		{"the holder's pod is being deleted: release it",
			view{self: "act-b", holder: "act-a", pods: []corev1.Pod{activatorPod("act-a", "10.0.0.1", deleting), b}},
			decision{campaign: true, release: "act-a", why: "its pod is being deleted", listed: []string{"act-b"}}},
		{"the holder's pod is gone but this replica cannot serve: release nothing",
			view{self: "act-b", holder: "act-a", pods: []corev1.Pod{activatorPod("act-b", "10.0.0.2", notReady)}},
			decision{}},
		{"a peer's process exited: out of the slices",
			view{self: "act-b", holder: "act-b", leading: true, pods: []corev1.Pod{activatorPod("act-a", "10.0.0.1", exited), b}},
			decision{campaign: true, listed: []string{"act-b"}}},
		{"a peer restarted and is ready again: listed",
			view{self: "act-b", holder: "act-b", leading: true, pods: []corev1.Pod{activatorPod("act-a", "10.0.0.1", func(p *corev1.Pod) { p.Status.ContainerStatuses[0].RestartCount = 3 }), b}},
			decision{campaign: true, listed: []string{"act-a", "act-b"}}},
		{"a peer still pending, one without an address, one IPv6 only: none listed",
			view{self: "act-b", pods: []corev1.Pod{
				activatorPod("act-a", "10.0.0.1", func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending }),
				activatorPod("act-c", ""), activatorPod("act-d", "fd00::4"), b}},
			decision{campaign: true, listed: []string{"act-b"}}},
		{"not run in a pod of the pool: campaign, release nobody, list the pool",
			view{self: "laptop", holder: "act-z", pods: []corev1.Pod{a, b}},
			decision{campaign: true, listed: []string{"act-a", "act-b"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, decide(tc.v), cmp.AllowUnexported(decision{})); diff != "" {
				t.Errorf("decide (-want +got):\n%s", diff)
			}
		})
	}
}
