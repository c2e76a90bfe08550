package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	crwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/ebb-dev/ebb/webhook/webhooktest"
)

type options struct {
	rate     int
	duration time.Duration
	apps     int
	target   time.Duration

	webhookBin string
	cpuProfile string
	bare       bool
	control    bool
	smoke      bool
}

func main() {
	var o options
	flag.IntVar(&o.rate, "rate", 50, "pods created per second")
	flag.DurationVar(&o.duration, "duration", 20*time.Second, "how long to create pods")
	flag.IntVar(&o.apps, "apps", 10, "Deployments the pods are spread over")
	flag.DurationVar(&o.target, "target-p99", 10*time.Millisecond, "p99 admission latency to meet")
	flag.BoolVar(&o.control, "control", true, "also register a no-op webhook as a control")
	flag.BoolVar(&o.bare, "bare", false, "create bare pods (no Deployment owns them)")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the ebb-webhook process during the run to this file")
	flag.StringVar(&o.webhookBin, "webhook-bin", "", "ebb-webhook binary to run (default: go build ./cmd/ebb-webhook)")
	flag.BoolVar(&o.smoke, "smoke", false, "check that the bench still runs end to end, in seconds: -rate 20 -duration 2s -apps 2, and no p99 target (the other checks stay)")
	flag.Parse()
	if o.smoke {
		o.rate, o.duration, o.apps = 20, 2*time.Second, 2
	}
	// The no-op webhook's server logs nothing worth reading here.
	ctrllog.SetLogger(logr.Discard())
	if err := run(context.Background(), o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

const (
	webhookName = "inject.ebb.dev"
	noopName    = "noop.bench.ebb.dev"
)

// startNoop serves and registers a webhook that admits every pod of the
// bench namespace unchanged, with the same machinery (controller-runtime's
// server, envtest's certificate, a URL client config): the control that
// shows what the API server and the host add to any webhook call.
func startNoop(ctx context.Context, env *webhooktest.Env) (func(), error) {
	none := admissionregistrationv1.SideEffectClassNone
	fail := admissionregistrationv1.Fail
	timeout := int32(5)
	path := "/noop"
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "noop.bench.ebb.dev"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:         noopName,
			ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Name: "noop", Namespace: "bench", Path: &path}},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
			}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"ebb.dev/inject": "enabled"}},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			TimeoutSeconds:          &timeout,
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
	wio := &envtest.WebhookInstallOptions{MutatingWebhooks: []*admissionregistrationv1.MutatingWebhookConfiguration{mwc}, LocalServingHost: "127.0.0.1"}
	if err := wio.PrepWithoutInstalling(); err != nil {
		return nil, fmt.Errorf("prepare no-op webhook: %w", err)
	}
	url := fmt.Sprintf("https://127.0.0.1:%d%s", wio.LocalServingPort, path)
	mwc.Webhooks[0].ClientConfig.URL = &url
	srv := crwebhook.NewServer(crwebhook.Options{Host: wio.LocalServingHost, Port: wio.LocalServingPort, CertDir: wio.LocalServingCertDir})
	srv.Register(path, &admission.Webhook{Handler: admission.HandlerFunc(func(context.Context, admission.Request) admission.Response {
		return admission.Allowed("")
	})})
	sctx, cancel := context.WithCancel(ctx)
	go func() { _ = srv.Start(sctx) }()
	if err := wio.Install(env.Config); err != nil {
		cancel()
		return nil, fmt.Errorf("install no-op webhook: %w", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for srv.StartedChecker()(nil) != nil {
		if time.Now().After(deadline) {
			cancel()
			return nil, fmt.Errorf("no-op webhook not serving after 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return func() { cancel(); _ = wio.Cleanup() }, nil
}

func run(ctx context.Context, o options) error {
	env, err := webhooktest.Start([]string{"ebb.dev"})
	if err != nil {
		return err
	}
	defer env.Stop()
	bin := o.webhookBin
	if bin == "" {
		dir, err := os.MkdirTemp("", "ebb-bench-")
		if err != nil {
			return fmt.Errorf("temp dir: %w", err)
		}
		defer os.RemoveAll(dir)
		if bin, err = webhooktest.BuildWebhook(dir); err != nil {
			return err
		}
	}
	logFile := filepath.Join(os.TempDir(), "ebb-bench-webhook.log")
	pprofAddr := "0"
	if o.cpuProfile != "" {
		pprofAddr = "127.0.0.1:6061"
	}
	proc, err := webhooktest.StartProcess(env, bin, "ebb.dev", admissionregistrationv1.Fail, logFile, "--pprof-bind-address="+pprofAddr)
	if err != nil {
		return err
	}
	defer proc.Stop()
	ebbHistogram := func() (histogram, error) { return scrapeEBB(ctx, proc.MetricsAddr) }
	if o.control {
		stopNoop, err := startNoop(ctx, env)
		if err != nil {
			return err
		}
		defer stopNoop()
	}

	c, err := client.New(env.Config, client.Options{})
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	const ns = "bench"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"ebb.dev/inject": "enabled"}}}); err != nil {
		return fmt.Errorf("namespace: %w", err)
	}
	templates := make([]corev1.PodTemplateSpec, o.apps)
	for i := range templates {
		if templates[i], err = deploymentChain(ctx, c, ns, fmt.Sprintf("app-%d", i)); err != nil {
			return err
		}
	}
	if o.bare {
		for i := range templates {
			templates[i].OwnerReferences = nil
		}
	}
	// Warm up: one pod per app, while the controller routes the Deployments.
	for i, t := range templates {
		if err := createPod(ctx, c, ns, t); err != nil {
			return fmt.Errorf("warm-up pod %d: %w", i, err)
		}
	}
	time.Sleep(time.Second)

	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		return fmt.Errorf("clientset: %w", err)
	}
	before, err := scrape(ctx, cs, webhookName)
	if err != nil {
		return err
	}
	noopBefore, err := scrape(ctx, cs, noopName)
	if err != nil {
		return err
	}
	ebbBefore, err := ebbHistogram()
	if err != nil {
		return err
	}

	profileDone := make(chan error, 1)
	if o.cpuProfile != "" {
		go func() { profileDone <- fetchProfile(ctx, pprofAddr, o.duration, o.cpuProfile) }()
	} else {
		profileDone <- nil
	}
	total := int(o.duration.Seconds() * float64(o.rate))
	lat := make([]time.Duration, 0, total)
	var mu sync.Mutex
	var wg sync.WaitGroup
	var failures int
	tick := time.NewTicker(time.Second / time.Duration(o.rate))
	start := time.Now()
	for i := 0; i < total; i++ {
		<-tick.C
		wg.Add(1)
		go func(t corev1.PodTemplateSpec) {
			defer wg.Done()
			t0 := time.Now()
			err := createPod(ctx, c, ns, t)
			d := time.Since(t0)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failures++
				return
			}
			lat = append(lat, d)
		}(templates[i%len(templates)])
	}
	wg.Wait()
	tick.Stop()
	if err := <-profileDone; err != nil {
		return err
	}
	elapsed := time.Since(start)

	after, err := scrape(ctx, cs, webhookName)
	if err != nil {
		return err
	}
	noopAfter, err := scrape(ctx, cs, noopName)
	if err != nil {
		return err
	}
	noop := subtract(noopAfter, noopBefore)
	ebbAfter, err := ebbHistogram()
	if err != nil {
		return err
	}
	apiserver := subtract(after, before)
	ebb := subtract(ebbAfter, ebbBefore)

	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	p99 := quantile(0.99, apiserver)
	fmt.Printf("## ebb webhook admission latency\n\n")
	fmt.Printf("%d pods over %d apps in %s (%.1f pods/s achieved, target %d/s), %d failed; envtest kube-apiserver, ebb-webhook as its own process, %s\n\n",
		len(lat), o.apps, elapsed.Round(time.Millisecond), float64(len(lat)+failures)/elapsed.Seconds(), o.rate, failures, hostNote())
	fmt.Printf("| measure | source | count | p50 | p99 | target |\n|---|---|---|---|---|---|\n")
	fmt.Printf("| admission webhook call | apiserver_admission_webhook_admission_duration_seconds{name=%q} | %d | %s | %s | p99 ≤ %s |\n",
		webhookName, apiserver.count, ms(quantile(0.5, apiserver)), ms(p99), o.target)
	fmt.Printf("| share of calls ≤ 5 ms | same histogram, le=\"0.005\" bucket | %d | | %.2f%% | |\n", apiserver.count, 100*apiserver.fractionBelow(0.005))
	if o.control {
		fmt.Printf("| control: no-op webhook, same API server and TLS | apiserver_admission_webhook_admission_duration_seconds{name=%q} | %d | %s | %s | |\n",
			noopName, noop.count, ms(quantile(0.5, noop)), ms(quantile(0.99, noop)))
		fmt.Printf("| control: share of calls ≤ 5 ms | same histogram | %d | | %.2f%% | |\n", noop.count, 100*noop.fractionBelow(0.005))
	}
	fmt.Printf("| webhook handler | ebb_webhook_admission_duration_seconds{result=\"injected\"} | %d | %s | %s | |\n",
		ebb.count, ms(quantile(0.5, ebb)), ms(quantile(0.99, ebb)))
	fmt.Printf("| whole pod create | client round trip | %d | %s | %s | |\n\n",
		len(lat), ms(exact(lat, 0.5)), ms(exact(lat, 0.99)))
	fmt.Printf("Quantiles from histograms interpolate linearly within buckets, as PromQL's histogram_quantile does (API server buckets: 5ms, 25ms, 100ms, …).\n")
	if apiserver.count == 0 {
		return fmt.Errorf("the API server recorded no call to %s", webhookName)
	}
	if failures > 0 {
		return fmt.Errorf("%d pod creations failed", failures)
	}
	if ebb.count == 0 {
		return errors.New("ebb-webhook's /metrics recorded no injection (ebb_webhook_admission_duration_seconds{result=\"injected\"})")
	}
	if !o.smoke && p99 > o.target.Seconds() {
		return fmt.Errorf("p99 %s over the target %s", ms(p99), o.target)
	}
	return nil
}

func hostNote() string {
	return fmt.Sprintf("%d CPUs shared", runtime.NumCPU())
}

func ms(seconds float64) string {
	if math.IsNaN(seconds) {
		return "n/a"
	}
	return fmt.Sprintf("%.2f ms", seconds*1000)
}

func exact(d []time.Duration, q float64) float64 {
	if len(d) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(q*float64(len(d)))) - 1
	if i < 0 {
		i = 0
	}
	return d[i].Seconds()
}

func deploymentChain(ctx context.Context, c client.Client, ns, name string) (corev1.PodTemplateSpec, error) {
	f, tr := false, true
	replicas := int32(1)
	tmpl := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{
			Labels:      map[string]string{"ebb.dev/app": name, "app.kubernetes.io/name": name},
			Annotations: map[string]string{"ebb.dev/hosts": name + ".example.com"},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "app", Image: "hello:1",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
				HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http")},
			}},
			SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: &f},
		}}},
	}
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": name}}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: sel, Template: tmpl}}
	if err := c.Create(ctx, d); err != nil {
		return tmpl, fmt.Errorf("create deployment %s: %w", name, err)
	}
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-abc", Labels: tmpl.Labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: name, UID: d.UID, Controller: &tr}}},
		Spec: appsv1.ReplicaSetSpec{Replicas: &replicas, Selector: sel, Template: tmpl},
	}
	if err := c.Create(ctx, rs); err != nil {
		return tmpl, fmt.Errorf("create replicaset %s: %w", rs.Name, err)
	}
	tmpl.GenerateName = name + "-abc-"
	tmpl.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: &tr}}
	return tmpl, nil
}

func createPod(ctx context.Context, c client.Client, ns string, t corev1.PodTemplateSpec) error {
	pod := &corev1.Pod{ObjectMeta: *t.ObjectMeta.DeepCopy(), Spec: *t.Spec.DeepCopy()}
	pod.Namespace = ns
	if err := c.Create(ctx, pod); err != nil {
		return err
	}
	if len(pod.Spec.InitContainers) == 0 {
		return fmt.Errorf("pod %s admitted without sidecar", pod.Name)
	}
	return nil
}

// histogram is a cumulative histogram: upper bounds and counts.
type histogram struct {
	bounds []float64
	counts []float64 // cumulative, same length as bounds (+Inf last)
	count  uint64
}

func (h histogram) fractionBelow(le float64) float64 {
	for i, b := range h.bounds {
		if b == le && h.count > 0 {
			return h.counts[i] / float64(h.count)
		}
	}
	return math.NaN()
}

func fromDTO(hs []*dto.Histogram) histogram {
	var h histogram
	idx := map[float64]int{}
	for _, x := range hs {
		for _, b := range x.GetBucket() {
			i, ok := idx[b.GetUpperBound()]
			if !ok {
				i = len(h.bounds)
				idx[b.GetUpperBound()] = i
				h.bounds = append(h.bounds, b.GetUpperBound())
				h.counts = append(h.counts, 0)
			}
			h.counts[i] += float64(b.GetCumulativeCount())
		}
		h.count += x.GetSampleCount()
	}
	if len(h.bounds) == 0 || !math.IsInf(h.bounds[len(h.bounds)-1], 1) {
		h.bounds = append(h.bounds, math.Inf(1))
		h.counts = append(h.counts, float64(h.count))
	}
	return h
}

func subtract(a, b histogram) histogram {
	out := histogram{bounds: a.bounds, counts: make([]float64, len(a.counts)), count: a.count - b.count}
	for i := range a.counts {
		out.counts[i] = a.counts[i]
		if i < len(b.counts) {
			out.counts[i] -= b.counts[i]
		}
	}
	return out
}

// quantile is PromQL's histogram_quantile.
func quantile(q float64, h histogram) float64 {
	if h.count == 0 {
		return math.NaN()
	}
	rank := q * float64(h.count)
	for i, c := range h.counts {
		if c >= rank {
			if math.IsInf(h.bounds[i], 1) {
				return h.bounds[i-1]
			}
			lo, prev := 0.0, 0.0
			if i > 0 {
				lo, prev = h.bounds[i-1], h.counts[i-1]
			}
			if c == prev {
				return h.bounds[i]
			}
			return lo + (h.bounds[i]-lo)*(rank-prev)/(c-prev)
		}
	}
	return h.bounds[len(h.bounds)-1]
}

// scrape reads the API server's webhook admission histogram for the webhook
// named name on pod CREATE (all label combinations summed).
func scrape(ctx context.Context, cs *kubernetes.Clientset, name string) (histogram, error) {
	raw, err := cs.RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return histogram{}, fmt.Errorf("scrape API server metrics: %w", err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(raw)))
	if err != nil {
		return histogram{}, fmt.Errorf("parse API server metrics: %w", err)
	}
	var hs []*dto.Histogram
	if f := fams["apiserver_admission_webhook_admission_duration_seconds"]; f != nil {
		for _, m := range f.GetMetric() {
			if label(m, "name") == name && label(m, "operation") == "CREATE" {
				hs = append(hs, m.GetHistogram())
			}
		}
	}
	return fromDTO(hs), nil
}

// fetchProfile saves a CPU profile of the ebb-webhook process over d.
func fetchProfile(ctx context.Context, addr string, d time.Duration, path string) error {
	url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, int(d.Seconds()))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("cpu profile: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("cpu profile: %w", err)
	}
	defer resp.Body.Close()
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("cpu profile: %w", err)
	}
	defer f.Close()
	if _, err := io.Copy(f, resp.Body); err != nil {
		return fmt.Errorf("cpu profile: %w", err)
	}
	return nil
}

// scrapeEBB reads the webhook's own handler histogram from its /metrics.
func scrapeEBB(ctx context.Context, addr string) (histogram, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return histogram{}, fmt.Errorf("scrape ebb-webhook: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return histogram{}, fmt.Errorf("scrape ebb-webhook: %w", err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return histogram{}, fmt.Errorf("parse ebb-webhook metrics: %w", err)
	}
	var hs []*dto.Histogram
	if f := fams["ebb_webhook_admission_duration_seconds"]; f != nil {
		for _, m := range f.GetMetric() {
			if label(m, "result") == "injected" {
				hs = append(hs, m.GetHistogram())
			}
		}
	}
	return fromDTO(hs), nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
