package federation

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
// after the interval: it reads every member, decides the shares, writes the
// maxima that come down, then (only if all of those are in force) the ones
// that go up, and writes the status.
func (r *reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var fs routingv1alpha1.FederatedScale
	if err := r.client.Get(ctx, req.NamespacedName, &fs); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("get FederatedScale: %w", err)
	}
	rd, err := r.readMembers(ctx, &fs)
	if err != nil {
		return ctrl.Result{}, err
	}
	rd.decide()
	writeErrs := r.writeShares(ctx, rd, lowerings)
	if len(writeErrs) == 0 && !rd.lowerPending() {
		writeErrs = r.writeShares(ctx, rd, raisings)
	}
	if err := r.writeStatus(ctx, rd, writeErrs); err != nil {
		return ctrl.Result{RequeueAfter: r.interval}, err
	}
	if len(writeErrs) > 0 {
		// In the condition, and tried again next interval: returned, the
		// error would back the whole object off, reads included.
		rd.log.Error(errors.Join(writeErrs...), "bounds not written")
	}
	return ctrl.Result{RequeueAfter: r.interval}, nil
}

// round is one reconcile of one FederatedScale: what it read of every
// member and what it decided, by the index of spec.clusters.
type round struct {
	fs                  *routingv1alpha1.FederatedScale
	log                 logr.Logger
	t                   *tracker
	window, unreachable time.Duration
	begin, now          time.Time // the reads began, and ended
	reads               []memberRead
	members             []Member // as Split sees them
	d                   Decision
}

// memberRead is one member's read this round: its clients and picture, or
// why it could not be read.
type memberRead struct {
	m   *member
	p   picture
	err error
}

// forget drops what the controller keeps of a deleted FederatedScale: its
// tracker and its series.
func (r *reconciler) forget(key client.ObjectKey) {
	r.mu.Lock()
	delete(r.trackers, key)
	r.mu.Unlock()
	r.metrics.forget(key.Namespace, key.Name)
}

// readMembers reads every member of fs at once (one that does not answer
// costs the read timeout, not the others' time), records each read in
// fs's tracker, and returns the round with every member as Split will see
// it. Only listing the member Secrets fails it: a member that cannot be
// read is a result of the round.
func (r *reconciler) readMembers(ctx context.Context, fs *routingv1alpha1.FederatedScale) (*round, error) {
	var secrets corev1.SecretList
	if err := r.client.List(ctx, &secrets, client.InNamespace(r.namespace), client.HasLabels{r.names.Key(MemberLabel)}); err != nil {
		return nil, fmt.Errorf("list member Secrets: %w", err)
	}
	rd := &round{
		fs:          fs,
		log:         r.log.WithValues("federatedscale", client.ObjectKeyFromObject(fs)),
		t:           r.tracker(client.ObjectKeyFromObject(fs)),
		window:      seconds(fs.Spec.Rebalance.StabilizationSeconds, DefaultStabilization),
		unreachable: seconds(fs.Spec.Rebalance.UnreachableSeconds, DefaultUnreachable),
		reads:       make([]memberRead, len(fs.Spec.Clusters)),
		begin:       time.Now(),
	}
	var wg sync.WaitGroup
	for i, c := range fs.Spec.Clusters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, err := r.members.get(secrets.Items, r.names.Key(MemberLabel), r.names.Key(ScalerAnnotation), c.Name)
			if err == nil {
				rd.reads[i].p, err = m.read(ctx, fs.Namespace, fs.Spec.ScaledObjectName)
			}
			rd.reads[i].m, rd.reads[i].err = m, err
		}()
	}
	wg.Wait()
	rd.now = time.Now()
	rd.members = make([]Member, len(fs.Spec.Clusters))
	for i, c := range fs.Spec.Clusters {
		rd.members[i] = rd.observe(c, rd.reads[i])
	}
	return rd, nil
}

// observe records one member's read in its history and returns the member
// as Split sees it: reachable while read within the unreachable window,
// with its share as last decided (or, for a new leader, as the status
// says).
func (rd *round) observe(c routingv1alpha1.FederatedCluster, read memberRead) Member {
	o := rd.t.members[c.Name]
	if o == nil {
		o = &observed{}
		rd.t.members[c.Name] = o
	}
	if read.err != nil {
		o.lastErr = read.err
		if o.downSince.IsZero() {
			o.downSince = rd.now
		}
	} else {
		o.observe(rd.now, read.p, rd.window)
	}
	m := Member{
		Name: c.Name, Weight: max(c.Weight, 1),
		Reachable: !o.lastOK.IsZero() && rd.now.Sub(o.lastOK) < rd.unreachable,
		Unread:    read.err != nil,
		Used:      o.used(), AtMaxFor: o.atMaxFor(rd.now),
	}
	if c.MinReplicas != nil {
		m.Floor = *c.MinReplicas
	}
	if c.MaxReplicas != nil {
		m.Cap = *c.MaxReplicas
	}
	if sh, ok := rd.t.shares[c.Name]; ok {
		m.Min, m.Max, m.HasShare = sh.Min, sh.Max, true
	} else if st := findStatus(rd.fs.Status.Clusters, c.Name); st != nil {
		m.Min, m.Max, m.HasShare = st.MinReplicas, st.MaxReplicas, true // a new leader starts from the status
	}
	return m
}

// decide splits the global bounds (Split) and remembers every member's
// share as this leader's last decision (members no longer listed go).
func (rd *round) decide() {
	rd.d = Split(rd.fs.Spec.MinReplicas, rd.fs.Spec.MaxReplicas, rd.members, rd.window)
	clear(rd.t.shares)
	for _, sh := range rd.d.Shares {
		rd.t.shares[sh.Name] = sh
	}
	if rd.log.V(1).Enabled() {
		for i, m := range rd.members {
			p := rd.reads[i].p
			rd.log.V(1).Info("member read", "cluster", m.Name, "err", rd.reads[i].err, "reachable", m.Reachable,
				"current", p.current, "desired", p.desired, "soMax", p.soMax, "limited", p.limited, "atMaxFor", m.AtMaxFor, "used", m.Used,
				"share", rd.d.Shares[i], "readIn", rd.now.Sub(rd.begin))
		}
	}
}

// lowerPending reports whether a member not read this round should have
// its max come down: it keeps its max in force until it is written, so
// nothing may be raised meanwhile.
func (rd *round) lowerPending() bool {
	for i, s := range rd.d.Shares {
		if rd.reads[i].err != nil && rd.members[i].HasShare && s.Max < rd.members[i].Max {
			return true
		}
	}
	return false
}

// Which writes writeShares makes.
const (
	lowerings = true  // the members whose max stays or comes down
	raisings  = false // the members whose max goes up
)

// writeShares writes the share of every member read this round whose
// ScaledObject does not hold it yet and whose max comes down (lowerings)
// or goes up (raisings). Lowerings are written first and raisings only if
// they all are, so the maxima in force never add up to more than the
// global max; a member not read keeps its bounds. It returns the writes
// that failed.
func (r *reconciler) writeShares(ctx context.Context, rd *round, lowering bool) []error {
	var errs []error
	for i, s := range rd.d.Shares {
		read := rd.reads[i]
		if read.err != nil || (read.p.soMin == s.Min && read.p.soMax == s.Max) || (s.Max <= read.p.soMax) != lowering {
			continue
		}
		if err := read.m.write(ctx, rd.fs.Namespace, rd.fs.Spec.ScaledObjectName, s); err != nil {
			errs = append(errs, fmt.Errorf("cluster %s: %w", s.Name, err))
			continue
		}
		r.metrics.writes.WithLabelValues(rd.fs.Namespace, rd.fs.Name, s.Name).Inc()
		rd.log.V(1).Info("bounds written", "cluster", s.Name, "min", s.Min, "max", s.Max, "wasMin", read.p.soMin, "wasMax", read.p.soMax)
	}
	return errs
}

// writeStatus sets the members' series, announces a move of headroom that
// was written whole (status, event, series), and writes the status (every
// member's share and last read, and the MembersReachable and BoundsWritten
// conditions) if it changed.
func (r *reconciler) writeStatus(ctx context.Context, rd *round, writeErrs []error) error {
	fs := rd.fs
	st := routingv1alpha1.FederatedScaleStatus{ObservedGeneration: fs.Generation, LastMove: fs.Status.LastMove, LastMoveMessage: fs.Status.LastMoveMessage}
	var unreached []string
	for i, s := range rd.d.Shares {
		o := rd.t.members[s.Name]
		reachable := rd.members[i].Reachable
		cs := routingv1alpha1.FederatedClusterStatus{Name: s.Name, MinReplicas: s.Min, MaxReplicas: s.Max, Reachable: reachable}
		if !o.lastOK.IsZero() {
			cs.CurrentReplicas, cs.DesiredReplicas, cs.Requests = o.last.current, o.last.desired, o.last.requests
			cs.AtMax = !o.atMaxSince.IsZero()
			if reachable {
				st.Replicas += o.last.current
			}
		}
		if o.lastErr != nil {
			cs.Message = fmt.Sprintf("not read since %s: %v", o.downSince.UTC().Format(time.RFC3339), o.lastErr)
			unreached = append(unreached, fmt.Sprintf("%s (%v)", s.Name, o.lastErr))
		}
		r.metrics.reachable.WithLabelValues(fs.Namespace, fs.Name, s.Name).Set(b2f(reachable))
		r.metrics.maxShare.WithLabelValues(fs.Namespace, fs.Name, s.Name).Set(float64(s.Max))
		st.Clusters = append(st.Clusters, cs)
	}
	if rd.d.Moved != "" && len(writeErrs) == 0 {
		now := metav1.NewTime(rd.now)
		st.LastMove, st.LastMoveMessage = &now, "max headroom: "+rd.d.Moved
		r.metrics.moves.WithLabelValues(fs.Namespace, fs.Name).Inc()
		rd.log.Info("headroom moved", "what", rd.d.Moved)
		r.events.Eventf(fs, nil, corev1.EventTypeNormal, "HeadroomMoved", "Rebalance", "max headroom: %s", rd.d.Moved)
	}
	// A copy: SetStatusCondition changes the slice's elements in place,
	// and a change made in fs.Status too would compare equal below and
	// never be written.
	st.Conditions = slices.Clone(fs.Status.Conditions)
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
	if apiequality.Semantic.DeepEqual(st, fs.Status) {
		return nil
	}
	fs.Status = st
	if err := r.client.Status().Update(ctx, fs); err != nil {
		return fmt.Errorf("update FederatedScale status: %w", err)
	}
	return nil
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
