package federation

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/groupsuffix"
)

// Defaults of a FederatedScale's rebalance settings.
const (
	DefaultStabilization = 15 * time.Second
	DefaultUnreachable   = 10 * time.Second
)

// reconciler reads every member of a FederatedScale, splits the global
// bounds (Split) and writes each member's share, every Interval.
type reconciler struct {
	client    client.Client
	names     groupsuffix.Names
	namespace string // of the member Secrets
	interval  time.Duration
	members   *members
	events    events.EventRecorder
	log       logr.Logger
	metrics   *metrics

	mu       sync.Mutex
	trackers map[client.ObjectKey]*tracker
}

// tracker is what the controller remembers of one FederatedScale's
// members between reads (not in status: a new leader starts afresh, which
// only delays a move by one stabilization window).
type tracker struct {
	members map[string]*observed
	// shares is what this leader last decided, by member: the status may
	// lag it in the cache by a read, and deciding from a stale status
	// would undo a move it just made.
	shares map[string]Share
}

// observed is one member's history.
type observed struct {
	lastOK     time.Time
	lastErr    error
	downSince  time.Time
	last       picture
	samples    []sample // what it used, within the stabilization window
	atMaxSince time.Time
	shortSince time.Time // it wants more than it can place since
}

type sample struct {
	at   time.Time
	used int32
}

func (o *observed) observe(now time.Time, p picture, window time.Duration) {
	o.lastOK, o.lastErr, o.downSince, o.last = now, nil, time.Time{}, p
	// At its max: the autoscaler places all it wants and wants its max,
	// and (when the HPA says) would want more.
	atMax := p.current == p.desired && p.desired == p.soMax && p.soMax > 0 && (!p.hasLimitCondition || p.limited)
	switch {
	case !atMax:
		o.atMaxSince = time.Time{}
	case o.atMaxSince.IsZero():
		o.atMaxSince = now
	}
	used := p.desired
	if p.current < p.desired {
		if o.shortSince.IsZero() {
			o.shortSince = now
		}
		if now.Sub(o.shortSince) >= window {
			used = p.current // it cannot place the rest: that headroom may move
		}
	} else {
		o.shortSince = time.Time{}
	}
	o.samples = append(o.samples, sample{now, used})
	i := 0
	for i < len(o.samples)-1 && now.Sub(o.samples[i].at) > window {
		i++
	}
	o.samples = o.samples[i:]
}

func (o *observed) used() int32 {
	var u int32
	for _, s := range o.samples {
		u = max(u, s.used)
	}
	return u
}

func (o *observed) atMaxFor(now time.Time) time.Duration {
	if o.atMaxSince.IsZero() {
		return 0
	}
	return max(now.Sub(o.atMaxSince), time.Nanosecond)
}

func (r *reconciler) setup(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("federatedscale").
		For(&routingv1alpha1.FederatedScale{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// A member that does not answer holds its object's reconcile for
		// the read timeout; the others go on meanwhile.
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		Complete(r)
}

func (r *reconciler) tracker(key client.ObjectKey) *tracker {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.trackers[key]
	if t == nil {
		t = &tracker{members: map[string]*observed{}, shares: map[string]Share{}}
		r.trackers[key] = t
	}
	return t
}

func seconds(p *int32, def time.Duration) time.Duration {
	if p == nil {
		return def
	}
	return time.Duration(*p) * time.Second
}

// Reconcile reads, splits and writes one FederatedScale, and comes back
// after the interval.
func (r *reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var fs routingv1alpha1.FederatedScale
	if err := r.client.Get(ctx, req.NamespacedName, &fs); err != nil {
		if apierrors.IsNotFound(err) {
			r.mu.Lock()
			delete(r.trackers, req.NamespacedName)
			r.mu.Unlock()
			r.metrics.forget(req.Namespace, req.Name)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("get FederatedScale: %w", err)
	}
	log := r.log.WithValues("federatedscale", req.NamespacedName)
	var secrets corev1.SecretList
	if err := r.client.List(ctx, &secrets, client.InNamespace(r.namespace), client.HasLabels{r.names.Key(MemberLabel)}); err != nil {
		return ctrl.Result{}, fmt.Errorf("list member Secrets: %w", err)
	}
	window := seconds(fs.Spec.Rebalance.StabilizationSeconds, DefaultStabilization)
	unreachable := seconds(fs.Spec.Rebalance.UnreachableSeconds, DefaultUnreachable)
	t := r.tracker(req.NamespacedName)

	// Read every member at once: one that does not answer costs the read
	// timeout, not the others' time.
	type result struct {
		m   *member
		p   picture
		err error
	}
	results := make([]result, len(fs.Spec.Clusters))
	begin := time.Now()
	var wg sync.WaitGroup
	for i, c := range fs.Spec.Clusters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, err := r.members.get(secrets.Items, r.names.Key(MemberLabel), r.names.Key(ScalerAnnotation), c.Name)
			if err == nil {
				results[i].p, err = m.read(ctx, fs.Namespace, fs.Spec.ScaledObjectName)
			}
			results[i].m, results[i].err = m, err
		}()
	}
	wg.Wait()

	now := time.Now()
	ms := make([]Member, len(fs.Spec.Clusters))
	for i, c := range fs.Spec.Clusters {
		o := t.members[c.Name]
		if o == nil {
			o = &observed{}
			t.members[c.Name] = o
		}
		if err := results[i].err; err != nil {
			o.lastErr = err
			if o.downSince.IsZero() {
				o.downSince = now
			}
		} else {
			o.observe(now, results[i].p, window)
		}
		m := Member{
			Name: c.Name, Weight: max(c.Weight, 1),
			Reachable: !o.lastOK.IsZero() && now.Sub(o.lastOK) < unreachable,
			Unread:    results[i].err != nil,
			Used:      o.used(), AtMaxFor: o.atMaxFor(now),
		}
		if c.MinReplicas != nil {
			m.Floor = *c.MinReplicas
		}
		if c.MaxReplicas != nil {
			m.Cap = *c.MaxReplicas
		}
		if sh, ok := t.shares[c.Name]; ok {
			m.Min, m.Max, m.HasShare = sh.Min, sh.Max, true
		} else if st := findStatus(fs.Status.Clusters, c.Name); st != nil {
			m.Min, m.Max, m.HasShare = st.MinReplicas, st.MaxReplicas, true // a new leader starts from the status
		}
		ms[i] = m
	}
	d := Split(fs.Spec.MinReplicas, fs.Spec.MaxReplicas, ms, window)
	clear(t.shares) // members no longer listed go
	for _, sh := range d.Shares {
		t.shares[sh.Name] = sh
	}
	if log.V(1).Enabled() {
		for i, m := range ms {
			p := results[i].p
			log.V(1).Info("member read", "cluster", m.Name, "err", results[i].err, "reachable", m.Reachable,
				"current", p.current, "desired", p.desired, "soMax", p.soMax, "limited", p.limited, "atMaxFor", m.AtMaxFor, "used", m.Used,
				"share", d.Shares[i], "readIn", now.Sub(begin))
		}
	}

	// Write: the members whose max comes down first, then the others, so
	// the maxima in force never add up to more than the global max. A
	// member read this round is written; one not read keeps its bounds.
	var writeErrs []error
	// A member not read keeps its max in force: if its share came down
	// (the spec changed), nothing is raised until it is written.
	pendingLower := false
	for i, s := range d.Shares {
		pendingLower = pendingLower || (results[i].err != nil && ms[i].HasShare && s.Max < ms[i].Max)
	}
	for _, lowering := range []bool{true, false} {
		if !lowering && (len(writeErrs) > 0 || pendingLower) {
			break // a max that should have come down did not: raise nothing
		}
		for i, s := range d.Shares {
			res := results[i]
			if res.err != nil || (res.p.soMin == s.Min && res.p.soMax == s.Max) || (s.Max <= res.p.soMax) != lowering {
				continue
			}
			if err := res.m.write(ctx, fs.Namespace, fs.Spec.ScaledObjectName, s); err != nil {
				writeErrs = append(writeErrs, fmt.Errorf("cluster %s: %w", s.Name, err))
				continue
			}
			r.metrics.writes.WithLabelValues(fs.Namespace, fs.Name, s.Name).Inc()
			log.V(1).Info("bounds written", "cluster", s.Name, "min", s.Min, "max", s.Max, "wasMin", res.p.soMin, "wasMax", res.p.soMax)
		}
	}
	moved := d.Moved != "" && len(writeErrs) == 0

	st := routingv1alpha1.FederatedScaleStatus{ObservedGeneration: fs.Generation, LastMove: fs.Status.LastMove, LastMoveMessage: fs.Status.LastMoveMessage}
	var unreached []string
	for i, s := range d.Shares {
		o := t.members[s.Name]
		cs := routingv1alpha1.FederatedClusterStatus{Name: s.Name, MinReplicas: s.Min, MaxReplicas: s.Max, Reachable: ms[i].Reachable}
		if !o.lastOK.IsZero() {
			cs.CurrentReplicas, cs.DesiredReplicas, cs.Requests = o.last.current, o.last.desired, o.last.requests
			cs.AtMax = !o.atMaxSince.IsZero()
			if ms[i].Reachable {
				st.Replicas += o.last.current
			}
		}
		if o.lastErr != nil {
			cs.Message = fmt.Sprintf("not read since %s: %v", o.downSince.UTC().Format(time.RFC3339), o.lastErr)
			unreached = append(unreached, fmt.Sprintf("%s (%v)", s.Name, o.lastErr))
		}
		r.metrics.reachable.WithLabelValues(fs.Namespace, fs.Name, s.Name).Set(b2f(ms[i].Reachable))
		r.metrics.maxShare.WithLabelValues(fs.Namespace, fs.Name, s.Name).Set(float64(s.Max))
		st.Clusters = append(st.Clusters, cs)
	}
	if moved {
		nowT := metav1.NewTime(now)
		st.LastMove, st.LastMoveMessage = &nowT, "max headroom: "+d.Moved
		r.metrics.moves.WithLabelValues(fs.Namespace, fs.Name).Inc()
		log.Info("headroom moved", "what", d.Moved)
		r.events.Eventf(&fs, nil, corev1.EventTypeNormal, "HeadroomMoved", "Rebalance", "max headroom: %s", d.Moved)
	}
	st.Conditions = fs.Status.Conditions
	reach := metav1.Condition{Type: routingv1alpha1.ConditionMembersReachable, Status: metav1.ConditionTrue, Reason: "AllRead", Message: "every member cluster was read", ObservedGeneration: fs.Generation}
	if len(unreached) > 0 {
		reach.Status, reach.Reason, reach.Message = metav1.ConditionFalse, "NotRead", "not read: "+strings.Join(unreached, ", ")
	}
	meta.SetStatusCondition(&st.Conditions, reach)
	bounds := metav1.Condition{Type: routingv1alpha1.ConditionBoundsWritten, Status: metav1.ConditionTrue, Reason: "Written", Message: "every member read has its share", ObservedGeneration: fs.Generation}
	if len(writeErrs) > 0 {
		bounds.Status, bounds.Reason, bounds.Message = metav1.ConditionFalse, "WriteFailed", errors.Join(writeErrs...).Error()
	}
	meta.SetStatusCondition(&st.Conditions, bounds)
	if !apiequality.Semantic.DeepEqual(st, fs.Status) {
		fs.Status = st
		if err := r.client.Status().Update(ctx, &fs); err != nil {
			return ctrl.Result{RequeueAfter: r.interval}, fmt.Errorf("update FederatedScale status: %w", err)
		}
	}
	if len(writeErrs) > 0 {
		// In the condition, and tried again next interval: returned, the
		// error would back the whole object off, reads included.
		log.Error(errors.Join(writeErrs...), "bounds not written")
	}
	return ctrl.Result{RequeueAfter: r.interval}, nil
}

func findStatus(cs []routingv1alpha1.FederatedClusterStatus, name string) *routingv1alpha1.FederatedClusterStatus {
	for i := range cs {
		if cs[i].Name == name {
			return &cs[i]
		}
	}
	return nil
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// metrics are the controller's Prometheus series.
type metrics struct {
	writes    *prometheus.CounterVec
	moves     *prometheus.CounterVec
	reachable *prometheus.GaugeVec
	maxShare  *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	labels := []string{"namespace", "name", "cluster"}
	m := &metrics{
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ebb_federation_bound_writes_total",
			Help: "Writes of a member cluster's ScaledObject min/max."}, labels),
		moves: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ebb_federation_headroom_moves_total",
			Help: "Times max headroom moved between the members of a FederatedScale."}, []string{"namespace", "name"}),
		reachable: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ebb_federation_member_reachable",
			Help: "1 while a member cluster of a FederatedScale is read, else 0."}, labels),
		maxShare: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ebb_federation_member_max_replicas",
			Help: "A member cluster's share of a FederatedScale's max replicas."}, labels),
	}
	for _, c := range []prometheus.Collector{m.writes, m.moves, m.reachable, m.maxShare} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	return m, nil
}

func (m *metrics) forget(namespace, name string) {
	l := prometheus.Labels{"namespace": namespace, "name": name}
	m.writes.DeletePartialMatch(l)
	m.moves.DeletePartialMatch(l)
	m.reachable.DeletePartialMatch(l)
	m.maxShare.DeletePartialMatch(l)
}
