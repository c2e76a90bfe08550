package activator

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
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
	dir, err := cluster.BinDir()
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: bin dir:", err)
		return 1
	}
	for _, b := range []string{"ebb-activator", "ebb-sidecar", "ebb-test-app"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			fmt.Fprintf(os.Stderr, "FAIL: %s missing in %s: run `make build` (or go build -o bin/ ./cmd/ebb-activator ./cmd/ebb-sidecar && go build -o bin/ebb-test-app ./test/app) first: %v\n", b, dir, err)
			return 1
		}
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
