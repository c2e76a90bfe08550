// Package scaler is ebb-scaler, the KEDA external scaler. It discovers every
// app pod from the API, reads every sidecar's counters each tick, takes the
// activators' held counts as a push (internal/holdpush), and answers KEDA per
// app: concurrency (in flight + held), request rate over a window, and whether
// the app is active, pushing activation on StreamIsActive the moment it
// changes. An app is also active while an app that needs it (its
// AppRoute's spec.wakes names it) has a live pod, so a dependency chain
// goes to zero after its head, in reverse. Run is the whole binary; New + (*Scaler).Run let tests run it
// in-process.
package scaler
