package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/ebb-dev/ebb/test/workers"
)

// startWorkers installs the tests' own Worker CRD (workers.example.com, a
// PodSpecable kind with the scale subresource) and runs its controller in
// this process, as the registry runs (Options.Workers). The controller
// makes each Worker's pods and writes its status until Stop; its lines go
// to <Dir>/logs/workers.log.
func (c *Cluster) startWorkers() error {
	dir := filepath.Join(c.Dir, "workers-crd")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("worker CRD: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "crd.yaml"), workers.CRDYAML(), 0o644); err != nil {
		return fmt.Errorf("worker CRD: %w", err)
	}
	// Its own context: Start's may end before the tests do.
	ctx, cancel := context.WithCancel(context.Background())
	if err := c.ApplyCRDs(ctx, dir); err != nil {
		cancel()
		return err
	}
	log, err := os.Create(filepath.Join(c.Dir, "logs", "workers.log"))
	if err != nil {
		cancel()
		return fmt.Errorf("worker controller log: %w", err)
	}
	logf := func(format string, args ...any) {
		fmt.Fprintf(log, time.Now().Format("15:04:05.000")+" "+format+"\n", args...)
	}
	ctrl, err := workers.Start(ctx, c.RestConfig, logf)
	if err != nil {
		cancel()
		log.Close()
		return err
	}
	c.stopWorkers = func() {
		cancel()
		select {
		case <-ctrl.Done():
		case <-time.After(10 * time.Second):
			c.logf("stop: the worker controller did not stop within 10 s")
		}
		log.Close()
	}
	c.logf("worker controller running (CRD %s)", workers.ScaleTarget)
	return nil
}
