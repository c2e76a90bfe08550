package activator

import (
	"context"
	"os"
	"testing"

	"github.com/ebb-dev/ebb/test/cluster"
)

var lc *cluster.Cluster

func TestMain(m *testing.M) {
	os.Exit(cluster.Main(m, cluster.Options{}, func(_ context.Context, c *cluster.Cluster) error { lc = c; return nil }))
}
