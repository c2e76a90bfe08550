package scaler

import (
	"strings"
	"testing"
	"time"
)

// TestIdleOf: every reason of the Idle condition, and that it agrees with
// the activation rule KEDA is told (params.active).
func TestIdleOf(t *testing.T) {
	app := appKey{Namespace: "shop", Name: "hello"}
	def := params{app: app, window: time.Minute}
	withActivation := params{app: app, window: time.Minute, activation: 5}
	frontend := keep{by: appKey{Namespace: "shop", Name: "frontend"}, live: 1}
	cron := &otherTrigger{scaledObject: "hello", types: []string{"cron"}}
	for name, tc := range map[string]struct {
		p        params
		f        figures
		reason   string
		contains string
	}{
		"nothing at all":             {def, figures{}, ReasonNoRequests, "no request in flight or held, none in the last 1m0s"},
		"a pod without a sidecar":    {def, figures{bypassedPods: 2, inFlight: 3}, ReasonSidecarBypassed, "2 running pod(s) of app hello have no sidecar"},
		"held by the activator":      {def, figures{held: 3}, ReasonRequestsHeld, "3 request(s) held"},
		"in flight, short":           {def, figures{inFlight: 2, inWindow: 9}, ReasonRequestsInFlight, "2 request(s) in flight."},
		"an open WebSocket":          {def, figures{inFlight: 1, busyFor: 95 * time.Second}, ReasonRequestsInFlight, "without a break for 1m35s: a long-lived request or an open connection (WebSocket, stream)"},
		"recent requests":            {def, figures{inWindow: 7}, ReasonRecentRequests, "7 request(s) in the last 1m0s"},
		"released by the activator":  {def, figures{released: true}, ReasonRecentRequests, "requests left the activator's hold in the last 1m0s"},
		"released, with activation":  {withActivation, figures{released: true}, ReasonNoRequests, "no request in flight or held"},
		"below the activation":       {withActivation, figures{inFlight: 5, inWindow: 70}, ReasonBelowActivation, "concurrency 5 is not above activationConcurrency 5"},
		"above the activation":       {withActivation, figures{inFlight: 6}, ReasonRequestsInFlight, "6 request(s) in flight"},
		"recent, with an activation": {withActivation, figures{inWindow: 7}, ReasonNoRequests, "no request in flight or held"},
		"needed by a dependent":      {def, figures{kept: frontend}, ReasonNeededByDependents, "kept up by shop/frontend, which needs it (1 live pod)"},
		"needed by several":          {withActivation, figures{inFlight: 2, kept: keep{by: frontend.by, live: 3, others: 2}}, ReasonNeededByDependents, "(3 live pods), and by 2 other app(s) that need it"},
		"its own requests first":     {def, figures{inWindow: 1, kept: frontend}, ReasonRecentRequests, "1 request(s) in the last"},
		"cron keeps it up":           {def, figures{trigger: cron}, ReasonKeptUpByAnotherTrigger, "ebb sees no requests; the ScaledObject hello keeps the app up through another trigger (cron)."},
		"cron, below the activation": {withActivation, figures{inFlight: 1, trigger: cron}, ReasonKeptUpByAnotherTrigger, "through another trigger (cron)"},
		"cron, and requests":         {def, figures{inFlight: 1, trigger: cron}, ReasonRequestsInFlight, "1 request(s) in flight"},
		"cron, and a dependent":      {def, figures{kept: frontend, trigger: cron}, ReasonNeededByDependents, "kept up by shop/frontend"},
	} {
		t.Run(name, func(t *testing.T) {
			got := idleOf(tc.p, tc.f)
			if got.Reason != tc.reason || !strings.Contains(got.Message, tc.contains) {
				t.Errorf("idleOf = %+v, want reason %s and a message with %q", got, tc.reason, tc.contains)
			}
			if got.Idle == tc.p.active(tc.f) {
				t.Errorf("Idle = %v but active = %v: the condition contradicts what KEDA is told", got.Idle, tc.p.active(tc.f))
			}
		})
	}
}
