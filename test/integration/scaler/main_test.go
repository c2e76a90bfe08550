// Package scaler_test runs ebb-scaler against the local cluster's real API
// server with the real KEDA operator asking it, and real sidecars in real
// pods answering it.
package scaler_test

import (
	"context"
	"os"
	"testing"

	"github.com/ebb-dev/ebb/test/cluster"
)

var lc *cluster.Cluster

func TestMain(m *testing.M) {
	os.Exit(cluster.Main(m, cluster.Options{KEDA: true}, func(_ context.Context, c *cluster.Cluster) error { lc = c; return nil }))
}
