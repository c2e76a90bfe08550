// Command webhook measures ebb's admission latency as the API server sees
// it: it starts a real kube-apiserver (envtest) and the ebb-webhook binary,
// creates app pods at a steady rate (owned by ReplicaSets of Deployments, as
// in a cluster; the AppRoute controller routes the Deployments, the admission
// itself makes no API call), and reads the API server's own apiserver_admission_webhook_admission_duration_seconds
// histogram, next to a no-op control webhook registered the same way. It
// prints a markdown table and exits non-zero when p99 is over the target.
//
//	go run ./test/bench/webhook -rate 50 -duration 20s
//
// With -smoke it creates 40 pods in 2 s and leaves the p99 target out (a
// pod refused or admitted without its sidecar still fails it): make test
// runs it so that the bench cannot stop working unseen.
package main
