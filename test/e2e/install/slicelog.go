package install

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ebb-dev/ebb/test/cluster"
)

// SliceLog records every change of a namespace's EndpointSlices, to show
// how a Service's endpoints moved when a scenario fails.
type SliceLog struct {
	mu    sync.Mutex
	lines []string
	stop  context.CancelFunc
	done  chan struct{}
}

// WatchSlices starts recording the EndpointSlices of ns; Stop ends it.
func WatchSlices(ctx context.Context, c *cluster.Cluster, ns string) (*SliceLog, error) {
	ctx, cancel := context.WithCancel(ctx)
	list, err := c.Client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("list endpoint slices of %s: %w", ns, err)
	}
	w, err := c.Client.DiscoveryV1().EndpointSlices(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("watch endpoint slices of %s: %w", ns, err)
	}
	l := &SliceLog{stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		defer w.Stop()
		for ev := range w.ResultChan() {
			s, ok := ev.Object.(*discoveryv1.EndpointSlice)
			if !ok {
				l.mu.Lock()
				l.lines = append(l.lines, fmt.Sprintf("%s %s %v", time.Now().Format("15:04:05.000"), ev.Type, ev.Object))
				l.mu.Unlock()
				continue
			}
			var eps []string
			for _, e := range s.Endpoints {
				state := "ready"
				if e.Conditions.Ready != nil && !*e.Conditions.Ready {
					state = "not-ready"
					if e.Conditions.Serving != nil && *e.Conditions.Serving {
						state = "serving"
					}
				}
				eps = append(eps, strings.Join(e.Addresses, ",")+"="+state)
			}
			l.mu.Lock()
			l.lines = append(l.lines, fmt.Sprintf("%s %-8s %s (%s) [%s]", time.Now().Format("15:04:05.000"), ev.Type, s.Name,
				s.Labels[discoveryv1.LabelManagedBy], strings.Join(eps, " ")))
			l.mu.Unlock()
		}
	}()
	return l, nil
}

// Stop ends the recording.
func (l *SliceLog) Stop() {
	l.stop()
	<-l.done
}

// String is the recorded changes, one a line.
func (l *SliceLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}
