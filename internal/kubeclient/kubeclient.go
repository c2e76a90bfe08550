// Package kubeclient sets up what every ebb binary that talks to the API server
// sets up the same way: its client configuration, and client-go's and
// controller-runtime's logs routed into the binary's own logger.
package kubeclient

import (
	"flag"
	"fmt"
	"path/filepath"
	"strconv"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
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

// KlogDebugVerbosity is klog's -v when a binary logs at debug: client-go's
// steady-state detail (leader election, informers), not every request.
const KlogDebugVerbosity = 2

// RouteLogs sends klog's (client-go's) and controller-runtime's lines to
// log. With debug, klog's lines up to KlogDebugVerbosity are kept.
func RouteLogs(log logr.Logger, debug bool) {
	v := 0
	if debug {
		v = KlogDebugVerbosity
	}
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("v", strconv.Itoa(v)) // a valid level: cannot fail
	klog.SetLogger(log.WithName("client-go"))
	ctrllog.SetLogger(log)
}
