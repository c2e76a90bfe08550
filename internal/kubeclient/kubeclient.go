// Package kubeclient loads the client configuration the same way for every
// ebb binary that talks to the API server.
package kubeclient

import (
	"fmt"
	"path/filepath"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/flowcontrol"
)

// Config is the client configuration from kubeconfig (--kubeconfig, or
// KUBECONFIG: a path or a list of paths); empty means in-cluster, then
// ~/.kube/config.
func Config(kubeconfig string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	switch paths := filepath.SplitList(kubeconfig); {
	case len(paths) == 1:
		rules.ExplicitPath = paths[0]
	case len(paths) > 1:
		rules.Precedence = paths
	default:
		if cfg, err := rest.InClusterConfig(); err == nil {
			return cfg, nil
		}
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %q (empty: in-cluster, then ~/.kube/config): %w", kubeconfig, err)
	}
	return cfg, nil
}

// Default client-side limits of a binary's requests to the API server
// (--kube-api-qps, --kube-api-burst; KEDA's operator names its own the
// same). client-go's 5/10 starves a fleet: the scaler writes an Idle
// condition per app that changes, and 1,000 apps waking or sleeping
// together are 1,000 writes; at 50/s after a burst of 100 they drain in
// 18 s, well inside the API server's default in-flight limits (400 reads,
// 200 writes), and an idle fleet spends none of it.
const (
	DefaultQPS   = 50
	DefaultBurst = 100
)

// Limit makes every client built from cfg share one budget of qps requests
// per second with bursts of burst: the binary's requests, not each
// client's, are limited. qps ≤ 0 keeps client-go's default. A client that
// must not wait behind the others' bursts (leader election: a renewal
// that waits past its deadline loses the Lease) takes Separate(cfg).
func Limit(cfg *rest.Config, qps float64, burst int) {
	if qps <= 0 {
		return
	}
	if burst < 1 {
		burst = 1
	}
	cfg.QPS, cfg.Burst = float32(qps), burst
	cfg.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(cfg.QPS, cfg.Burst)
}

// Separate is a copy of cfg whose clients share a token bucket of their
// own, of cfg's size (QPS and Burst): their requests never wait for tokens
// that a burst of cfg's clients took. Leader election takes one, so that
// a burst of bulk writes (a fleet's status writes) cannot hold a Lease
// renewal past its deadline. cfg without a QPS gets client-go's default
// limits, one bucket per client.
func Separate(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.RateLimiter = nil
	if c.QPS > 0 {
		c.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(c.QPS, max(c.Burst, 1))
	}
	return c
}
