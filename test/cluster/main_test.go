package cluster_test

import (
	"os"
	"testing"

	"github.com/ebb-dev/ebb/test/cluster"
)

// lc is the local cluster every test of this package shares.
var lc *cluster.Cluster

func TestMain(m *testing.M) {
	os.Exit(cluster.Main(m, cluster.Options{KEDAMetricsAdapter: true}, func(c *cluster.Cluster) { lc = c }))
}
