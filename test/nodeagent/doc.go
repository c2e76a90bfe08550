// Package nodeagent is the local cluster's kubelet stand-in. It registers a
// Node and renews its Lease, binds pending pods to it (there is no
// scheduler), and runs each pod's containers as local processes inside the
// pod's own network namespace: init containers in order, native sidecars
// (init containers with restartPolicy Always) alongside the app, with the
// container's args and env (downward-API fields resolved), volumes bind
// mounted, probes driving the pod's conditions, crashed containers
// restarted, and SIGTERM → grace period → SIGKILL on deletion.
//
// Images are not pulled. A container's image names a program in the bin
// directory by its last path segment without tag or digest:
// "ghcr.io/ebb-dev/ebb-sidecar:v0.1.0" runs <bin>/ebb-sidecar. The
// container's command, if set, only contributes its arguments after the
// first (command[1:] then args); a missing program leaves the container
// waiting with reason ErrImageNeverPull.
//
// Cluster DNS names resolve through a per-pod hosts file
// (/etc/netns/<netns>/hosts, which `ip netns exec` mounts over /etc/hosts):
// every Service's svc.ns, svc.ns.svc and svc.ns.svc.cluster.local, and the
// bare name for Services in the pod's own namespace. It is rewritten in
// place when Services change.
package nodeagent
