package scaler

import (
	"context"
	"math"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// service is KEDA's ExternalScaler. StreamMetricSpec stays unimplemented:
// targets only change with the ScaledObject, and KEDA falls back to
// GetMetricSpec.
type service struct {
	externalscaler.UnimplementedExternalScalerServer
	s *Scaler
}

var errNotReady = status.Error(codes.Unavailable, "ebb-scaler has not finished its first read of every sidecar yet: answering now could scale apps to zero; retry shortly")

// params reads what a ScaledObject asks for; a refusal is also posted on
// the ScaledObject, where its owner looks.
func (v *service) params(ctx context.Context, ref *externalscaler.ScaledObjectRef) (params, error) {
	if !v.s.ready.Load() {
		return params{}, errNotReady
	}
	p, err := v.checked(ref)
	if err != nil {
		v.s.refusals.report(ref, err)
	}
	return p, err
}

func (v *service) checked(ref *externalscaler.ScaledObjectRef) (params, error) {
	p, err := parseParams(ref, v.s.opts.Tick, v.s.opts.MaxRateWindow)
	if err != nil {
		return p, err
	}
	if !v.s.reg.present(p.app) {
		// No pod and nothing held: at zero, or no such app at all.
		if err := v.s.routes.check(p.app); err != nil { // from the AppRoute cache: no API request
			return params{}, err
		}
	}
	p.scaledObject = ref.GetName()
	v.s.asked.set(p)
	return p, nil
}

// figures returns the app's figures; an app the scaler has never seen (no
// pod, nothing held) has all zeros.
func (v *service) figures(p params, now time.Time) figures {
	return v.s.figuresOf(p, now)
}

func (v *service) IsActive(ctx context.Context, ref *externalscaler.ScaledObjectRef) (*externalscaler.IsActiveResponse, error) {
	p, err := v.params(ctx, ref)
	if err != nil {
		return nil, err
	}
	return &externalscaler.IsActiveResponse{Result: p.active(v.figures(p, time.Now()))}, nil
}

// StreamIsActive sends the app's activity at once, then every change the
// moment it is known: an activator push wakes it directly, a tick (for the
// sidecars and the window) wakes it once per tick.
func (v *service) StreamIsActive(ref *externalscaler.ScaledObjectRef, stream grpc.ServerStreamingServer[externalscaler.IsActiveResponse]) error {
	p, err := v.params(stream.Context(), ref)
	if err != nil {
		return err
	}
	a := v.s.reg.watch(p.app, time.Now())
	defer v.s.reg.unwatch(a)
	v.s.metrics.streams.Inc()
	defer v.s.metrics.streams.Dec()
	sent, last := false, false
	for {
		// Read before a.mu: keptUp takes the registry's lock. The tick
		// wakes the stream each second, so a dependent's pods that come
		// or go are seen within a tick.
		kept := v.s.keptUp(p.app)
		a.mu.Lock()
		f := a.figuresLocked(time.Now(), p.window)
		f.kept = kept
		active := p.active(f)
		changed := a.changed
		a.mu.Unlock()
		if !sent || active != last {
			if err := stream.Send(&externalscaler.IsActiveResponse{Result: active}); err != nil {
				return err
			}
			sent, last = true, active
		}
		select {
		case <-stream.Context().Done():
			return nil
		case <-changed:
		}
	}
}

func (v *service) GetMetricSpec(ctx context.Context, ref *externalscaler.ScaledObjectRef) (*externalscaler.GetMetricSpecResponse, error) {
	p, err := v.params(ctx, ref)
	if err != nil {
		return nil, err
	}
	return &externalscaler.GetMetricSpecResponse{MetricSpecs: []*externalscaler.MetricSpec{{
		MetricName:      p.metricName(),
		TargetSize:      int64(math.Ceil(p.target)),
		TargetSizeFloat: p.target,
	}}}, nil
}

func (v *service) GetMetrics(ctx context.Context, req *externalscaler.GetMetricsRequest) (*externalscaler.GetMetricsResponse, error) {
	p, err := v.params(ctx, req.GetScaledObjectRef())
	if err != nil {
		return nil, err
	}
	if n := req.GetMetricName(); n != "" && n != p.metricName() {
		return nil, status.Errorf(codes.InvalidArgument, "metric %q is not served for ScaledObject %s/%s: its metadata asks for %q (KEDA reads the name from GetMetricSpec)",
			n, req.GetScaledObjectRef().GetNamespace(), req.GetScaledObjectRef().GetName(), p.metricName())
	}
	now := time.Now()
	val := p.value(v.figures(p, now), v.s.span(now))
	return &externalscaler.GetMetricsResponse{MetricValues: []*externalscaler.MetricValue{{
		MetricName:       p.metricName(),
		MetricValue:      int64(math.Round(val)),
		MetricValueFloat: val,
	}}}, nil
}

// span is how long the scaler has been counting, at least one tick: a rate
// over a window longer than that divides by what was actually observed, so
// a replica that just started agrees with one that has run for hours.
func (s *Scaler) span(now time.Time) time.Duration {
	first := s.firstTick.Load()
	if first == 0 {
		return s.opts.Tick
	}
	return max(now.Sub(time.Unix(0, first)), s.opts.Tick)
}
