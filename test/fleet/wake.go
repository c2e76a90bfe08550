package fleet

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/ebb-dev/ebb/activator/proxy"
	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/test/e2e/install"
)

// Wake is one cold start of an app at zero, woken by one GET through its
// Service's ClusterIP.
type Wake struct {
	App App
	// Sent is when its request was sent, Total what the client waited for
	// its answer.
	Sent   time.Time
	Total  time.Duration
	Status int
	Err    error
	// ColdStart is the AppRoute's status.lastColdStart of this cold
	// start, nil if none came within 15 s of the answer.
	ColdStart *routingv1alpha1.ColdStart
}

// EbbPhases are the phases of a cold start that are ebb's own, by the
// activator's names (proxy.PhaseNames, one per mark in the order the marks
// happen): the activator's hold until the scaler is told (the first), the
// sidecar's readiness check of the started app and the forward to the
// first byte (the last two). KEDA's scale on the scaler's push (Scaled),
// the control plane's (PodCreated, PodScheduled) and the kubelet's
// (ContainersStarted) are not: in a fleet, KEDA's operator is the busy one
// (its client's requests per second bound how soon it scales), and the
// tables show its Scaled phase on a row of its own.
var EbbPhases = []string{
	proxy.PhaseNames[0],                       // ScalerTold
	proxy.PhaseNames[len(proxy.PhaseNames)-3], // SidecarReady (Dependencies, next, waits on other apps' cold starts)
	proxy.PhaseNames[len(proxy.PhaseNames)-1], // FirstByte
}

// EbbPart is ebb's part of a cold start: the sum of its EbbPhases.
func EbbPart(cs *routingv1alpha1.ColdStart) time.Duration {
	var d time.Duration
	for _, p := range cs.Phases {
		if slices.Contains(EbbPhases, p.Name) {
			d += p.Duration.Duration
		}
	}
	return d
}

// MissingEbbPhases lists the EbbPhases a cold start does not have: with
// any missing, EbbPart is not ebb's part.
func MissingEbbPhases(cs *routingv1alpha1.ColdStart) []string {
	var missing []string
	for _, name := range EbbPhases {
		if !slices.ContainsFunc(cs.Phases, func(p routingv1alpha1.ColdStartPhase) bool { return p.Name == name }) {
			missing = append(missing, name)
		}
	}
	return missing
}

// OK says the wake was answered 200 and its cold start recorded with
// every one of EbbPhases.
func (w Wake) OK() bool {
	return w.Err == nil && w.Status == http.StatusOK && w.ColdStart != nil && len(MissingEbbPhases(w.ColdStart)) == 0
}

func (w Wake) String() string {
	if w.Err != nil || w.Status != http.StatusOK {
		return fmt.Sprintf("%s/%s: %d %v after %s", w.App.Namespace, w.App.Name, w.Status, w.Err, w.Total.Round(time.Millisecond))
	}
	if w.ColdStart == nil {
		return fmt.Sprintf("%s/%s: 200 after %s, no status.lastColdStart", w.App.Namespace, w.App.Name, w.Total.Round(time.Millisecond))
	}
	part := "ebb's part " + EbbPart(w.ColdStart).Round(time.Millisecond).String()
	if missing := MissingEbbPhases(w.ColdStart); len(missing) > 0 {
		part = fmt.Sprintf("status.lastColdStart without ebb's phases %v", missing)
	}
	s := fmt.Sprintf("%s/%s: 200 after %s, %s:", w.App.Namespace, w.App.Name, w.Total.Round(time.Millisecond), part)
	for _, p := range w.ColdStart.Phases {
		s += fmt.Sprintf(" %s %s", p.Name, p.Duration.Duration.Round(time.Millisecond))
	}
	return s
}

// WakeEach wakes apps one at a time: each once routed to the activator
// (install.WaitRoutedToActivator, which wakes nothing), then one GET with
// a 60 s timeout, then its status.lastColdStart.
func (f *Fleet) WakeEach(ctx context.Context, apps []App) []Wake {
	out := make([]Wake, 0, len(apps))
	for _, a := range apps {
		if err := install.WaitRoutedToActivator(ctx, a.URL, 30*time.Second); err != nil {
			out = append(out, Wake{App: a, Err: err})
			continue
		}
		w := f.get(ctx, a)
		f.coldStart(ctx, &w)
		out = append(out, w)
	}
	return out
}

// WakeTogether wakes apps at once, once each is routed to the activator.
func (f *Fleet) WakeTogether(ctx context.Context, apps []App) []Wake {
	out := make([]Wake, len(apps))
	for i, a := range apps {
		if err := install.WaitRoutedToActivator(ctx, a.URL, 30*time.Second); err != nil {
			out[i] = Wake{App: a, Err: err}
		}
	}
	var wg sync.WaitGroup
	for i, a := range apps {
		if out[i].Err != nil {
			continue
		}
		wg.Go(func() { out[i] = f.get(ctx, a) })
	}
	wg.Wait()
	for i := range out {
		if out[i].Err == nil {
			wg.Go(func() { f.coldStart(ctx, &out[i]) })
		}
	}
	wg.Wait()
	return out
}

func (f *Fleet) get(ctx context.Context, a App) Wake {
	client := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	r := install.Get(ctx, client, a.URL, a.Host)
	return Wake{App: a, Sent: r.Sent, Total: r.Took, Status: r.Status, Err: r.Err}
}

// coldStart waits up to 15 s for the app's status.lastColdStart of a cold
// start that began at most a second before the wake was sent.
func (f *Fleet) coldStart(ctx context.Context, w *Wake) {
	sent := w.Sent
	_ = poll(ctx, 100*time.Millisecond, 15*time.Second, "status.lastColdStart", func(ctx context.Context) (bool, error) {
		r, err := f.appRoute(ctx, w.App)
		if err != nil || r.Status.LastColdStart == nil || r.Status.LastColdStart.Began.Time.Before(sent.Add(-time.Second)) {
			return false, nil
		}
		w.ColdStart = r.Status.LastColdStart
		return true, nil
	})
}

// Stats are the median and the largest of some durations.
type Stats struct {
	N           int
	Median, Max time.Duration
}

func (s Stats) String() string {
	if s.N == 0 {
		return "–"
	}
	return fmt.Sprintf("%s (max %s)", s.Median.Round(time.Millisecond), s.Max.Round(time.Millisecond))
}

// Summarize returns the stats of ebb's part and of the total over the
// wakes that are OK (answered 200, their cold start recorded with ebb's
// phases), and how many were not.
func Summarize(wakes []Wake) (ebb, total Stats, failed int) {
	var e, t []time.Duration
	for _, w := range wakes {
		if !w.OK() {
			failed++
			continue
		}
		e, t = append(e, EbbPart(w.ColdStart)), append(t, w.Total)
	}
	return stats(e), stats(t), failed
}

func stats(d []time.Duration) Stats {
	if len(d) == 0 {
		return Stats{}
	}
	slices.Sort(d)
	return Stats{N: len(d), Median: d[len(d)/2], Max: d[len(d)-1]}
}

func (f *Fleet) appRoute(ctx context.Context, a App) (*routingv1alpha1.AppRoute, error) {
	u, err := f.Dyn.Resource(routingv1alpha1.GroupVersionResource(f.Release.Names.Group())).Namespace(a.Namespace).Get(ctx, a.Name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	var r routingv1alpha1.AppRoute
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &r); err != nil {
		return nil, fmt.Errorf("AppRoute %s/%s: %w", a.Namespace, a.Name, err)
	}
	return &r, nil
}

// Phase returns the stats of one phase of the wakes' cold starts (those
// that are OK): Scaled is KEDA's reaction
// to the scaler's push within ebb's part.
func Phase(wakes []Wake, name string) Stats {
	var d []time.Duration
	for _, w := range wakes {
		if !w.OK() {
			continue
		}
		for _, p := range w.ColdStart.Phases {
			if p.Name == name {
				d = append(d, p.Duration.Duration)
			}
		}
	}
	return stats(d)
}
