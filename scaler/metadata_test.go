package scaler

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestParseParams(t *testing.T) {
	hello := appKey{Namespace: ns, Name: "hello"}
	for name, tc := range map[string]struct {
		md   map[string]string
		want params
	}{
		"concurrency":       {map[string]string{"app": "hello", "targetConcurrency": "100", "scalerAddress": "ebb-scaler:9090"}, params{app: hello, kind: kindConcurrency, target: 100, window: time.Minute}},
		"fractional target": {map[string]string{"app": "hello", "targetConcurrency": "0.5"}, params{app: hello, kind: kindConcurrency, target: 0.5, window: time.Minute}},
		"rate, window":      {map[string]string{"app": "hello", "targetRate": "50", "rateWindow": "30s"}, params{app: hello, kind: kindRate, target: 50, window: 30 * time.Second}},
		"activation":        {map[string]string{"app": "hello", "targetConcurrency": "10", "activationConcurrency": "2"}, params{app: hello, kind: kindConcurrency, target: 10, window: time.Minute, activation: 2}},
		"window at max":     {map[string]string{"app": "hello", "targetRate": "1", "rateWindow": "10m"}, params{app: hello, kind: kindRate, target: 1, window: 10 * time.Minute}},
		"window at tick":    {map[string]string{"app": "hello", "targetRate": "1", "rateWindow": "1s"}, params{app: hello, kind: kindRate, target: 1, window: time.Second}},
		"KEDA's keys": {map[string]string{"app": "hello", "targetConcurrency": "1", "scalerAddress": "s:9090", "caCert": "x", "tlsClientCert": "x", "tlsClientKey": "x", "unsafeSsl": "false", "enableTLS": "true"},
			params{app: hello, kind: kindConcurrency, target: 1, window: time.Minute}},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := parseParams(ref(tc.md), time.Second, 10*time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(params{})); diff != "" {
				t.Errorf("params (-want +got):\n%s", diff)
			}
		})
	}
}

// badMetadata is every way a ScaledObject's metadata can be wrong, with the
// message KEDA will show (after "ScaledObject shop/so: ").
var badMetadata = map[string]struct {
	md   map[string]string
	want string
}{
	"no app":           {map[string]string{"targetConcurrency": "1"}, `metadata "app" is required: set it to the name of the app's AppRoute (the value of its pods' app label) in namespace "shop"`},
	"empty app":        {map[string]string{"app": "", "targetConcurrency": "1"}, `metadata "app" is required: set it to the name of the app's AppRoute (the value of its pods' app label) in namespace "shop"`},
	"bad app":          {map[string]string{"app": "hello world", "targetConcurrency": "1"}, `metadata "app" is "hello world", not a valid app name:`},
	"no target":        {map[string]string{"app": "hello"}, `metadata sets neither "targetConcurrency" nor "targetRate": set one, e.g. targetConcurrency: "100" (requests in flight per replica)`},
	"both targets":     {map[string]string{"app": "hello", "targetConcurrency": "1", "targetRate": "1"}, `metadata sets both "targetConcurrency" and "targetRate": keep only one`},
	"target not num":   {map[string]string{"app": "hello", "targetConcurrency": "lots"}, `metadata "targetConcurrency" is "lots": set it to a number above 0, the requests in flight one replica should take, e.g. "100"`},
	"target zero":      {map[string]string{"app": "hello", "targetConcurrency": "0"}, `metadata "targetConcurrency" is "0": set it to a number above 0`},
	"rate negative":    {map[string]string{"app": "hello", "targetRate": "-3"}, `metadata "targetRate" is "-3": set it to a number above 0, the requests per second one replica should take, e.g. "50"`},
	"rate NaN":         {map[string]string{"app": "hello", "targetRate": "NaN"}, `metadata "targetRate" is "NaN": set it to a number above 0`},
	"window not dur":   {map[string]string{"app": "hello", "targetRate": "1", "rateWindow": "60"}, `metadata "rateWindow" is "60", not a duration: set it like "1m" or "30s"`},
	"window too long":  {map[string]string{"app": "hello", "targetRate": "1", "rateWindow": "1h"}, `metadata "rateWindow" is 1h0m0s: set it between the scaler's tick (1s) and its --max-rate-window (10m0s)`},
	"window too short": {map[string]string{"app": "hello", "targetRate": "1", "rateWindow": "100ms"}, `metadata "rateWindow" is 100ms: set it between the scaler's tick (1s)`},
	"activation bad":   {map[string]string{"app": "hello", "targetRate": "1", "activationConcurrency": "-1"}, `metadata "activationConcurrency" is "-1": set it to a number of requests, 0 or more`},
	"miscased key":     {map[string]string{"app": "hello", "targetconcurrency": "1"}, `metadata "targetconcurrency" is not a key ebb reads: did you mean "targetConcurrency"?`},
	"misspelled key":   {map[string]string{"app": "hello", "targetConcurrency": "1", "activationConcurency": "5"}, `metadata "activationConcurency" is not a key ebb reads: did you mean "activationConcurrency"?`},
	"misspelled app":   {map[string]string{"ap": "hello", "targetConcurrency": "1"}, `metadata "ap" is not a key ebb reads: did you mean "app"?`},
}

func TestParseParamsRejects(t *testing.T) {
	for name, tc := range badMetadata {
		t.Run(name, func(t *testing.T) {
			_, err := parseParams(ref(tc.md), time.Second, 10*time.Minute)
			st := status.Convert(err)
			if st.Code() != codes.InvalidArgument || !strings.HasPrefix(st.Message(), "ScaledObject shop/so: ") || !strings.Contains(st.Message(), tc.want) {
				t.Errorf("error = %v\nwant InvalidArgument containing %q", err, tc.want)
			}
		})
	}
}

func TestParseParamsReportsEveryProblem(t *testing.T) {
	_, err := parseParams(ref(map[string]string{"targetRate": "x", "rateWindow": "y"}), time.Second, 10*time.Minute)
	for _, field := range []string{`"app"`, `"targetRate"`, `"rateWindow"`} {
		if !strings.Contains(status.Convert(err).Message(), field) {
			t.Errorf("error %v does not name %s", err, field)
		}
	}
}

func TestActiveRule(t *testing.T) {
	for name, tc := range map[string]struct {
		p    params
		f    figures
		want bool
	}{
		"idle":                               {params{}, figures{}, false},
		"in flight":                          {params{}, figures{inFlight: 1}, true},
		"held":                               {params{}, figures{held: 1}, true},
		"counted in window":                  {params{}, figures{inWindow: 1}, true},
		"bypassed pod":                       {params{activation: 100}, figures{bypassedPods: 1}, true},
		"below activation":                   {params{activation: 5}, figures{inFlight: 3, held: 2}, false},
		"above activation":                   {params{activation: 5}, figures{inFlight: 3, held: 3}, true},
		"window ignored with activation > 0": {params{activation: 5}, figures{inWindow: 1000}, false},
		"needed by a live dependent":         {params{activation: 5}, figures{kept: keep{live: 1}}, true},
		"another trigger: not ebb's to say":  {params{}, figures{trigger: &otherTrigger{types: []string{"cron"}}}, false},
	} {
		if got := tc.p.active(tc.f); got != tc.want {
			t.Errorf("%s: active = %v, want %v", name, got, tc.want)
		}
	}
}

func TestHistoryWindow(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var h history
	h.add(t0, 5)                     // 5 counted at t0
	h.add(t0.Add(30*time.Second), 8) // 3 more at t0+30s
	h.add(t0.Add(90*time.Second), 9) // 1 more at t0+90s
	now := t0.Add(100 * time.Second)
	for _, tc := range []struct {
		window time.Duration
		want   uint64
	}{{5 * time.Second, 0}, {11 * time.Second, 1}, {time.Minute, 1}, {80 * time.Second, 4}, {time.Hour, 9}} {
		if got := h.since(now.Add(-tc.window), 9); got != tc.want {
			t.Errorf("counted within %s = %d, want %d", tc.window, got, tc.want)
		}
	}
	h.prune(t0.Add(time.Minute)) // forget what is older than a minute
	if got, want := h.since(now.Add(-time.Hour), 9), uint64(1); got != want {
		t.Errorf("after pruning, counted since long ago = %d, want %d (the pruned part is the base)", got, want)
	}
	if got, want := h.since(now.Add(-80*time.Second), 9), uint64(1); got != want {
		t.Errorf("after pruning, counted within 80s = %d, want %d", got, want)
	}
}
