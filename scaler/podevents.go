package scaler

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The reasons of the Warning events the scaler posts on a pod (kubectl
// describe pod): its /stats answer was refused, or it answered so slowly
// that it is read off the tick.
const (
	ReasonStatsRefused = "StatsRefused"
	ReasonStatsSlow    = "StatsSlow"
)

// podEvents posts StatsRefused and StatsSlow events on pods, at most one
// per pod and reason per refusalEvery, through a queue of podEventQueue events posted
// one at a time, so a fleet of hostile pods costs the API server a bounded
// rate and the tick nothing (events beyond the queue are dropped, and
// counted in ebb_scaler_sidecar_refused_total all the same).
type podEvents struct {
	kube  kubernetes.Interface
	log   logr.Logger
	queue chan *eventsv1.Event
	seq   atomic.Uint32

	every onceEvery // keyed namespace/name/reason
}

const podEventQueue = 64

func newPodEvents(kube kubernetes.Interface, log logr.Logger) *podEvents {
	return &podEvents{kube: kube, log: log, queue: make(chan *eventsv1.Event, podEventQueue)}
}

// report queues an event on p unless one for the same reason was posted
// within refusalEvery; it does not block.
func (e *podEvents) report(p *pod, evReason, reason, note string, now time.Time) {
	ns, name, _ := cutKey(p.key)
	key := p.key + "/" + reason
	if !e.every.allow(key, now) {
		return
	}
	if len(note) > 1024 {
		note = note[:1021] + "..."
	}
	host, _ := os.Hostname()
	ev := &eventsv1.Event{
		// Named as kubectl's events are, <object>.<hex time>: a fake
		// clientset does not generate names.
		ObjectMeta: metav1.ObjectMeta{Name: eventName(name, now, e.seq.Add(1)), Namespace: ns},
		EventTime:  metav1.NewMicroTime(now),
		Regarding:  corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: ns, Name: name, UID: p.uid},
		Type:       corev1.EventTypeWarning, Reason: evReason, Action: "ReadStats", Note: note,
		ReportingController: "ebb-scaler", ReportingInstance: host,
	}
	select {
	case e.queue <- ev:
	default:
		e.log.V(1).Info("event queue full: event dropped", "pod", p.key, "event", evReason, "reason", reason)
	}
}

// run posts queued events until ctx ends.
func (e *podEvents) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-e.queue:
			pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			if _, err := e.kube.EventsV1().Events(ev.Namespace).Create(pctx, ev, metav1.CreateOptions{}); err != nil {
				e.log.V(1).Info("cannot post the event on the pod", "event", ev.Reason, "pod", ev.Namespace+"/"+ev.Regarding.Name, "err", err.Error())
			}
			cancel()
		}
	}
}

func cutKey(key string) (ns, name string, ok bool) {
	for i := range len(key) {
		if key[i] == '/' {
			return key[:i], key[i+1:], true
		}
	}
	return "", key, false
}

// refuse counts, logs (on a change of reason) and reports a refused
// reading of p.
func (s *Scaler) refuse(p *pod, reason, msg string) {
	s.metrics.refused.WithLabelValues(reason).Inc()
	st := &p.readState
	if st.refused != reason {
		st.refused = reason
		s.log.Info("sidecar's answer refused: its figures are not counted", "pod", p.key, "app", p.app.key.Name, "reason", reason, "why", msg)
	}
	note := fmt.Sprintf("ebb-scaler refused what this pod's %s answered to GET /stats (app %s, reason %s): %s; its figures are not counted while it answers so.", SidecarContainer, p.app.key.Name, reason, msg)
	s.podEvents.report(p, ReasonStatsRefused, reason, note, time.Now())
}

// eventName is <pod>.<hex time><hex seq>, the pod's part cut so that the
// whole stays within the 253 characters of an object name (a pod's own name
// may take all of them).
func eventName(pod string, now time.Time, seq uint32) string {
	suffix := fmt.Sprintf(".%x%02x", now.UnixNano(), seq%256)
	if len(pod) > 253-len(suffix) {
		pod = strings.TrimRight(pod[:253-len(suffix)], ".-")
	}
	return pod + suffix
}
