package scaler

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/ebb-dev/ebb/internal/suggest"
)

// ScaledObject trigger metadata keys.
const (
	MetaApp                   = "app"
	MetaTargetConcurrency     = "targetConcurrency"
	MetaTargetRate            = "targetRate"
	MetaRateWindow            = "rateWindow"
	MetaActivationConcurrency = "activationConcurrency"

	// DefaultRateWindow is rateWindow when the metadata does not set it.
	DefaultRateWindow = time.Minute
)

type metricKind int

const (
	kindConcurrency metricKind = iota
	kindRate
)

func (k metricKind) String() string {
	if k == kindRate {
		return "rate"
	}
	return "concurrency"
}

// params is what one ScaledObject asks about one app.
type params struct {
	app        appKey
	kind       metricKind
	target     float64
	window     time.Duration
	activation float64

	// scaledObject names the ScaledObject that asked (in app's
	// namespace); set by the service, not from the metadata.
	scaledObject string
}

// metricName is stable and distinct per app and kind; KEDA prefixes it with
// the trigger index ("s0-ebb-concurrency-hello").
func (p params) metricName() string { return "ebb-" + p.kind.String() + "-" + p.app.Name }

// active is the activation rule: an app with a pod the scaler cannot see
// (no sidecar) is always active, and so is an app that an app with a live
// pod needs (figures.kept); otherwise it is active while its
// concurrency exceeds activationConcurrency or, when that is 0 (the default),
// while any request was counted or left the activators' hold within the
// window (figures.released).
func (p params) active(f figures) bool {
	switch {
	case f.bypassedPods > 0:
		return true
	case f.kept.live > 0: // an app that needs this one has a live pod (Scaler.keptUp)
		return true
	case float64(f.concurrency()) > p.activation:
		return true
	default:
		return p.activation == 0 && f.recent()
	}
}

// value is the metric KEDA's HPA divides by the target.
func (p params) value(f figures, span time.Duration) float64 {
	if p.kind == kindRate {
		return float64(f.inWindow) / min(p.window, span).Seconds()
	}
	return float64(f.concurrency())
}

var known = []string{MetaApp, MetaTargetConcurrency, MetaTargetRate, MetaRateWindow, MetaActivationConcurrency}

// parseParams reads a ScaledObject's trigger metadata. Every problem is
// reported at once, naming the field and the fix, as InvalidArgument: KEDA
// shows the message in the ScaledObject's status and events.
func parseParams(ref *externalscaler.ScaledObjectRef, tick, maxWindow time.Duration) (params, error) {
	if ref == nil {
		return params{}, status.Error(codes.InvalidArgument, "no ScaledObjectRef in the request")
	}
	md := ref.GetScalerMetadata()
	p := params{app: appKey{Namespace: ref.GetNamespace(), Name: md[MetaApp]}, window: DefaultRateWindow}
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }

	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if slices.Contains(known, k) {
			continue
		}
		// Other keys are KEDA's (scalerAddress, TLS files) or another
		// scaler's: only a near miss of one of ebb's is refused.
		if want := suggest.Nearest(k, known); want != "" {
			bad("metadata %q is not a key ebb reads: did you mean %q?", k, want)
		}
	}
	if p.app.Namespace == "" {
		bad("the ScaledObject has no namespace")
	}
	switch app, ok := md[MetaApp]; {
	case !ok || app == "":
		bad("metadata %q is required: set it to the name of the app's AppRoute (the value of its pods' app label) in namespace %q", MetaApp, p.app.Namespace)
	default:
		if e := validation.IsValidLabelValue(app); len(e) > 0 {
			bad("metadata %q is %q, not a valid app name: %s", MetaApp, app, strings.Join(e, "; "))
		}
	}

	conc, hasConc := md[MetaTargetConcurrency]
	rate, hasRate := md[MetaTargetRate]
	switch {
	case hasConc && hasRate:
		bad("metadata sets both %q and %q: keep only one (concurrency scales on requests in flight, rate on requests per second)", MetaTargetConcurrency, MetaTargetRate)
	case !hasConc && !hasRate:
		bad("metadata sets neither %q nor %q: set one, e.g. %s: \"100\" (requests in flight per replica)", MetaTargetConcurrency, MetaTargetRate, MetaTargetConcurrency)
	case hasConc:
		p.kind = kindConcurrency
		p.target = positive(MetaTargetConcurrency, conc, "requests in flight one replica should take, e.g. \"100\"", bad)
	default:
		p.kind = kindRate
		p.target = positive(MetaTargetRate, rate, "requests per second one replica should take, e.g. \"50\"", bad)
	}

	if w, ok := md[MetaRateWindow]; ok {
		d, err := time.ParseDuration(w)
		switch {
		case err != nil:
			bad("metadata %q is %q, not a duration: set it like \"1m\" or \"30s\"", MetaRateWindow, w)
		case d < tick || d > maxWindow:
			bad("metadata %q is %s: set it between the scaler's tick (%s) and its --max-rate-window (%s)", MetaRateWindow, d, tick, maxWindow)
		default:
			p.window = d
		}
	}
	if a, ok := md[MetaActivationConcurrency]; ok {
		v, err := strconv.ParseFloat(a, 64)
		if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
			bad("metadata %q is %q: set it to a number of requests, 0 or more (0, the default, activates on any request)", MetaActivationConcurrency, a)
		} else {
			p.activation = v
		}
	}
	if len(errs) > 0 {
		return params{}, status.Errorf(codes.InvalidArgument, "ScaledObject %s/%s: %v", ref.GetNamespace(), ref.GetName(), strings.ReplaceAll(errors.Join(errs...).Error(), "\n", "; "))
	}
	return p, nil
}

func positive(key, v, what string, bad func(string, ...any)) float64 {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f <= 0 || math.IsInf(f, 0) || math.IsNaN(f) {
		bad("metadata %q is %q: set it to a number above 0, the %s", key, v, what)
		return 0
	}
	return f
}
