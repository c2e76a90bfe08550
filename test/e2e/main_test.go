package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ebb-dev/ebb/test/cluster"
	"github.com/ebb-dev/ebb/test/e2e/install"
)

// lc is the local cluster every test of this package shares, and ebb the
// release installed into it from the chart.
var (
	lc  *cluster.Cluster
	ebb *install.Release
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func logf(f string, a ...any) { fmt.Printf(time.Now().Format("15:04:05.000")+" "+f+"\n", a...) }

func run(m *testing.M) int {
	flag.Parse()
	if testing.Short() {
		fmt.Println("skipping the end-to-end tests in -short mode")
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute) // includes waiting for other packages' clusters
	defer cancel()
	c, err := cluster.Start(ctx, cluster.Options{KEDAMetricsAdapter: true, Logf: logf})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start local cluster:", err)
		return 1
	}
	defer c.Stop()
	lc = c
	// EBB_E2E_SET adds --set values (space-separated), e.g. to try another
	// image of a component: activator.image.tag=head.
	ebb, err = install.Install(ctx, c, install.Options{Logf: logf, Set: strings.Fields(os.Getenv("EBB_E2E_SET"))})
	if err != nil {
		fmt.Fprintf(os.Stderr, "install ebb from charts/ebb: %v\n(logs in %s/logs)\n", err, c.Dir)
		return 1
	}
	return m.Run()
}
