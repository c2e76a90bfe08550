package cluster_test

import (
	"context"
	"os"
	"testing"

	"github.com/ebb-dev/ebb/test/cluster"
)

// lc is the local cluster every test of this package shares.
var lc *cluster.Cluster

func TestMain(m *testing.M) {
	os.Exit(cluster.Main(m, cluster.Options{KEDAMetricsAdapter: true, Traefik: true, Workers: true}, func(_ context.Context, c *cluster.Cluster) error { lc = c; return nil }))
}
