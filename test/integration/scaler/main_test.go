// Package scaler_test runs ebb-scaler against the local cluster's real API
// server with the real KEDA operator asking it, and real sidecars in real
// pods answering it.
package scaler_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/ebb-dev/ebb/test/cluster"
)

var lc *cluster.Cluster

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	flag.Parse()
	if testing.Short() {
		fmt.Println("skipping local-cluster tests in -short mode")
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := cluster.Start(ctx, cluster.Options{KEDA: true, Logf: func(f string, a ...any) { fmt.Printf(f+"\n", a...) }})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start local cluster:", err)
		return 1
	}
	defer c.Stop()
	lc = c
	return m.Run()
}
