package webhook

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

// kedaMapper answers for ScaledObjects as an API server with KEDA
// installed (state 1), without it (0), or unreachable (2).
type kedaMapper struct {
	meta.RESTMapper
	state atomic.Int32
}

func (m *kedaMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	switch m.state.Load() {
	case 1:
		return &meta.RESTMapping{GroupVersionKind: scaledObjectKind}, nil
	case 2:
		return nil, errors.New("connection refused")
	}
	return nil, &meta.NoKindMatchError{GroupKind: gk, SearchedVersions: versions}
}

// TestKEDALookNotElected: a replica not elected looks for KEDA's API too,
// at once when it starts and at each interval after a discovery error, so
// that it knows KEDA is installed when it wins the Lease; it sends no
// resync (no controller reads it before the replica leads, and the
// controller's start reconciles every route anyway) and returns.
func TestKEDALookNotElected(t *testing.T) {
	defer func(d time.Duration) { kedaCheckInterval = d }(kedaCheckInterval)
	kedaCheckInterval = time.Hour
	m := &kedaMapper{}
	m.state.Store(1)
	watched := 0
	k := &keda{mapper: m, watch: func() error { watched++; return nil }, elected: make(chan struct{}), resync: make(chan event.GenericEvent), log: logr.Discard()}
	if k.NeedLeaderElection() {
		t.Error("the look for KEDA's API waits for the Lease")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := k.Start(ctx); err != nil || ctx.Err() != nil {
		t.Fatalf("Start: %v, ctx %v: want it back at once, KEDA found", err, ctx.Err())
	}
	if !k.installed.Load() || watched != 1 {
		t.Errorf("installed %v, watches started %d; want true, 1", k.installed.Load(), watched)
	}

	// A discovery error counts as absent; the next look finds it.
	kedaCheckInterval = 20 * time.Millisecond
	m.state.Store(2)
	k = &keda{mapper: m, watch: func() error { return nil }, elected: make(chan struct{}), resync: make(chan event.GenericEvent), log: logr.Discard()}
	done := make(chan error, 1)
	go func() { done <- k.Start(ctx) }()
	time.Sleep(100 * time.Millisecond)
	if k.installed.Load() {
		t.Fatal("installed while discovery fails")
	}
	m.state.Store(1)
	select {
	case err := <-done:
		if err != nil || !k.installed.Load() {
			t.Errorf("Start: %v, installed %v; want nil, true", err, k.installed.Load())
		}
	case <-ctx.Done():
		t.Fatal("the look did not find KEDA's API after the discovery error")
	}
}
