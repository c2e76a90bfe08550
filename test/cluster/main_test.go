package cluster_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/ebb-dev/ebb/test/cluster"
)

// lc is the local cluster every test of this package shares.
var lc *cluster.Cluster

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	flag.Parse()
	if testing.Short() {
		fmt.Println("skipping local-cluster tests in -short mode")
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	begin := time.Now()
	c, err := cluster.Start(ctx, cluster.Options{KEDAMetricsAdapter: true, Logf: func(f string, a ...any) { fmt.Printf(f+"\n", a...) }})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start local cluster:", err)
		return 1
	}
	defer c.Stop()
	fmt.Printf("local cluster with KEDA ready in %s\n", time.Since(begin).Round(time.Millisecond))
	lc = c
	return m.Run()
}
