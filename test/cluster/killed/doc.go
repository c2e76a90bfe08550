// Package killed proves that a local cluster killed mid-run (its test
// process SIGKILLed, as a CI timeout or a crash does) leaves containers,
// shims, mounts, cgroups, the bridge and kube-proxy's tables behind, and
// that the next run removes every one of them.
package killed
