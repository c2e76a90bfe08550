package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ebb-dev/ebb/internal/tracing/tracingtest"
	"github.com/ebb-dev/ebb/test/cluster"
	"github.com/ebb-dev/ebb/test/e2e/install"
	"github.com/ebb-dev/ebb/test/workers"
)

// lc is the local cluster every test of this package shares, and ebb the
// release installed into it from the chart.
var (
	lc  *cluster.Cluster
	ebb *install.Release
	// otlp receives the spans of the release's activators and sidecars,
	// on the node's address so pods reach it. The release samples no trace
	// of its own (tracing.samplingRatio=0): only requests that come with a
	// sampled traceparent are traced.
	otlp *tracingtest.Receiver
)

func TestMain(m *testing.M) {
	os.Exit(cluster.Main(m, cluster.Options{KEDAMetricsAdapter: true, AuditLog: true, Traefik: true, Workers: true, Logf: logf}, func(ctx context.Context, c *cluster.Cluster) error {
		lc = c
		// EBB_E2E_SET adds --set values (space-separated), e.g. to try another
		// image of a component: activator.image.tag=head.
		var err error
		if otlp, err = tracingtest.Start(net.JoinHostPort(cluster.BridgeIP, "0")); err != nil {
			return err
		}
		// The tests' own Worker kind (cluster.Options.Workers) is routed
		// as a custom scale target (TestCustomScaleTarget).
		set := append([]string{"tracing.endpoint=" + otlp.URL(), "tracing.samplingRatio=0", "scaleTargets={" + workers.ScaleTarget + "}"}, poolValues...)
		set = append(set, strings.Fields(os.Getenv("EBB_E2E_SET"))...)
		ebb, err = install.Install(ctx, c, install.Options{Logf: logf, Set: set})
		if err != nil {
			return fmt.Errorf("install ebb from charts/ebb: %w", err)
		}
		for _, p := range []string{"a", "b"} {
			if err := install.WaitDeploymentReady(ctx, c, ebb.Namespace, ebb.Fullname+"-activator-"+p, 3*time.Minute); err != nil {
				return err
			}
		}
		return nil
	}))
}

func logf(f string, a ...any) { fmt.Printf(time.Now().Format("15:04:05.000")+" "+f+"\n", a...) }
