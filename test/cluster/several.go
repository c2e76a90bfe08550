package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// StartSeveral brings up n independent local clusters (n ≤ MaxClusters),
// one after another under one machine lock: each with its own etcd, API
// server, controller manager, scheduler, kube-proxy, CoreDNS, containerd,
// kubelet and (with opts.KEDA) KEDA, its own pod and Service ranges, and,
// but for the first, its own network namespace (plan.go). opts.Dir, if
// set, gets a directory per cluster (c0, c1, ...). Stop them with
// StopSeveral.
func StartSeveral(ctx context.Context, n int, opts Options) (_ []*Cluster, err error) {
	if n < 1 || n > MaxClusters {
		return nil, fmt.Errorf("%d clusters: want 1 to %d", n, MaxClusters)
	}
	logf := opts.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	var lock *MachineLock
	if !opts.MachineLocked {
		if lock, err = LockMachine(logf); err != nil {
			return nil, err
		}
	}
	var cs []*Cluster
	defer func() {
		if err != nil {
			StopSeveral(cs)
			if lock != nil {
				lock.Unlock()
			}
		}
	}()
	for i := range n {
		o := opts
		o.Index, o.Several, o.MachineLocked = i, true, true
		if opts.Dir != "" {
			o.Dir = filepath.Join(opts.Dir, fmt.Sprintf("c%d", i))
		}
		o.Logf = func(f string, a ...any) { logf("cluster %d: "+f, append([]any{i}, a...)...) }
		c, err := Start(ctx, o)
		if err != nil {
			return cs, fmt.Errorf("cluster %d: %w", i, err)
		}
		cs = append(cs, c)
	}
	cs[0].lock = lock // released when the last one stops
	return cs, nil
}

// StopSeveral stops clusters started by StartSeveral, the last first, so
// that cluster 0, on the host's network, goes last.
func StopSeveral(cs []*Cluster) {
	for i := len(cs) - 1; i >= 0; i-- {
		cs[i].Stop()
	}
}

// MainSeveral is Main for a package whose tests run on n clusters.
func MainSeveral(m *testing.M, n int, opts Options, ready func(context.Context, []*Cluster) error) int {
	if !mainRuns(&opts) {
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	cs, err := StartSeveral(ctx, n, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "start local clusters:", err)
		return 1
	}
	defer StopSeveral(cs)
	if err := ready(ctx, cs); err != nil {
		fmt.Fprintf(os.Stderr, "set up the local clusters: %v\n", err)
		for _, c := range cs {
			fmt.Fprintf(os.Stderr, "(logs in %s/logs)\n", c.Dir)
		}
		return 1
	}
	return m.Run()
}
