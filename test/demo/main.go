package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/ebb-dev/ebb/test/cluster"
	"github.com/ebb-dev/ebb/test/e2e/install"
)

func main() {
	keep := flag.Bool("keep", false, "leave the cluster running until Ctrl-C and print how to reach it")
	requests := flag.Int("requests", 50, "concurrent requests sent to the app while it is at zero (1-500)")
	flag.Parse()
	if *requests < 1 || *requests > 500 {
		fmt.Fprintln(os.Stderr, "demo: --requests must be within 1-500")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *keep, *requests); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func say(format string, args ...any) {
	fmt.Printf("%s  %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

// row is a line of the summary table.
type row struct{ step, took string }

func run(ctx context.Context, keep bool, requests int) error {
	begin := time.Now()
	say("starting the local cluster (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy, CoreDNS, KEDA, kubelet + containerd, a registry with ebb's images)")
	c, err := cluster.Start(ctx, cluster.Options{KEDAMetricsAdapter: true, Logf: say})
	if err != nil {
		return err
	}
	defer func() {
		say("tearing the cluster down")
		c.Stop()
	}()
	var summary []row
	summary = append(summary, row{"local cluster up", time.Since(begin).Round(time.Millisecond).String()})

	step := time.Now()
	say("helm install ebb charts/ebb -n ebb-system --create-namespace --set certManager.enabled=false")
	ebb, err := install.Install(ctx, c, install.Options{Logf: say})
	if err != nil {
		return err
	}
	summary = append(summary, row{"ebb installed from the chart, every pod ready", time.Since(step).Round(time.Millisecond).String()})

	const ns, name = "demo", "hello"
	scaling := install.Scaling{Max: 3, PollingInterval: 1, Cooldown: 5, TargetConcurrency: 100, RateWindow: "3s"}
	say("deploying %s/%s at 0 replicas: namespace labelled %s=enabled, pod template labelled %s=%s, ScaledObject → %s",
		ns, name, ebb.Names.InjectLabel(), ebb.Names.AppLabel(), name, ebb.ScalerAddress)
	app, err := ebb.DeployAtZero(ctx, c, ns, name, scaling, say)
	if err != nil {
		return err
	}
	if app.StartedAtOne {
		say("(the webhook made no AppRoute for a Deployment created at 0 replicas: it was created at 1 and KEDA scaled it to 0)")
	}
	say("%s is at zero: no pod runs; the Service's only endpoints are the activator's hand-off slice", name)

	say("sending %d concurrent requests to http://%s (Host %s) through kube-proxy", requests, app.URL[len("http://"):], app.Host)
	tl := ebb.WatchColdStart(ctx, c, app)
	tl.Mark(install.EventFirstRequest)
	results := install.Send(ctx, app.URL, app.Host, requests, 90*time.Second)
	_ = cluster.WaitFor(ctx, 30*time.Second, "pod Ready", func(context.Context) (bool, error) {
		_, ok := tl.At(install.EventPodReady)
		return ok, nil
	})
	tl.Stop()
	ok := 0
	var took []time.Duration
	for _, r := range results {
		if r.Status == http.StatusOK {
			ok++
			tl.MarkAt(install.EventFirstResponse, r.Sent.Add(r.Took))
		}
		took = append(took, r.Took)
	}
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	if at, seen := tl.At(install.EventScalerHeld); seen {
		say("requests held by the activator; the scaler counted them %s after the first was sent", at.Sub(mustAt(tl, install.EventFirstRequest)).Round(time.Millisecond))
	}
	woken, _ := tl.Since(install.EventFirstRequest, install.EventFirstResponse)
	say("woken and served in %s: %d of %d answered 200 by the app (latency p50 %s, max %s)",
		woken.Round(time.Millisecond), ok, requests, took[len(took)/2].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond))
	fmt.Printf("\n  cold start timeline\n%s\n", tl)
	if err := install.Failures(results); err != nil {
		return fmt.Errorf("of %d requests, not 200:\n%w", requests, err)
	}
	summary = append(summary, row{fmt.Sprintf("cold start: %d held requests → first 200", requests), woken.Round(time.Millisecond).String()})
	if d, seen := tl.Since(install.EventFirstRequest, install.EventReplicas1); seen {
		summary = append(summary, row{"  of which: request → KEDA sets replicas=1", d.Round(time.Millisecond).String()})
	}
	if d, seen := tl.Since(install.EventReplicas1, install.EventAppRunning); seen {
		summary = append(summary, row{"  of which: replicas=1 → app container started", d.Round(time.Millisecond).String()})
	}
	summary = append(summary, row{"requests answered 200 / sent", fmt.Sprintf("%d / %d", ok, requests)})

	if keep {
		say("the cluster stays up until Ctrl-C (KEDA takes %s back to zero %ds after the last request). Try:\n\n"+
			"  export KUBECONFIG=%s\n"+
			"  kubectl get pods,deploy,endpointslices -n %s\n"+
			"  kubectl get approutes.%s -A\n"+
			"  kubectl get scaledobjects -n %s\n"+
			"  curl -H 'Host: %s' %s\n",
			name, scaling.Cooldown, c.Kubeconfig, ns, ebb.Names.Group(), ns, app.Host, app.URL)
		printSummary(summary)
		<-ctx.Done()
		return nil
	}

	idle := time.Now()
	say("no more traffic: waiting for KEDA to scale %s back to zero (rateWindow %s, cooldownPeriod %ds)", name, scaling.RateWindow, scaling.Cooldown)
	if err := ebb.WaitAtZero(ctx, c, app, 2*time.Minute); err != nil {
		return err
	}
	say("back to zero after %s idle: pod stopped, the activator's hand-off slice is back in the Service", time.Since(idle).Round(time.Millisecond))
	summary = append(summary, row{"idle → back to zero (hand-off slice back)", time.Since(idle).Round(time.Millisecond).String()})
	printSummary(summary)
	return nil
}

func mustAt(tl *install.Timeline, event string) time.Time {
	at, _ := tl.At(event)
	return at
}

func printSummary(rows []row) {
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "\n  step\ttook")
	fmt.Fprintln(tw, "  ----\t----")
	for _, r := range rows {
		fmt.Fprintf(tw, "  %s\t%s\n", r.step, r.took)
	}
	fmt.Fprintln(tw)
	tw.Flush()
}
