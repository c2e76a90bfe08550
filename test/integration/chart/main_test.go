package chart

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/ebb-dev/ebb/test/cluster"
)

var update = flag.Bool("update", false, "copy config/crd's generated CRD into the chart")

// lc is the local cluster of the API-server tests; nil under -short, where
// only the rendering tests run.
var lc *cluster.Cluster

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	flag.Parse()
	if testing.Short() {
		fmt.Println("-short: skipping the tests against the local cluster")
		return m.Run()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute) // includes waiting for other packages' clusters
	defer cancel()
	c, err := cluster.Start(ctx, cluster.Options{Logf: func(f string, a ...any) { fmt.Printf(f+"\n", a...) }})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start local cluster:", err)
		return 1
	}
	defer c.Stop()
	lc = c
	return m.Run()
}

func needCluster(t *testing.T) *cluster.Cluster {
	t.Helper()
	if lc == nil {
		t.Skip("needs the local cluster (not with -short)")
	}
	return lc
}
