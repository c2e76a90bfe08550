// Package kubeclient loads the client configuration the same way for every
// ebb binary that talks to the API server.
package kubeclient

import (
	"fmt"
	"path/filepath"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
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
