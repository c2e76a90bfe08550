package chart

import (
	"context"
	"flag"
	"os"
	"testing"

	"github.com/ebb-dev/ebb/test/cluster"
)

var update = flag.Bool("update", false, "copy config/crd's generated CRD into the chart")

// lc is the local cluster of the API-server tests.
var lc *cluster.Cluster

func TestMain(m *testing.M) {
	os.Exit(cluster.Main(m, cluster.Options{}, func(_ context.Context, c *cluster.Cluster) error { lc = c; return nil }))
}
