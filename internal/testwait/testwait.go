// Package testwait is how ebb's tests wait for what happens asynchronously:
// poll until a condition holds or a check passes, and fail the test with
// what did not happen once a deadline passes.
package testwait

import (
	"errors"
	"testing"
	"time"
)

// maxInterval bounds the pause between two polls: short enough that a test
// does not wait long after the condition holds, long enough that a check
// calling an API server does not flood it.
const maxInterval = 10 * time.Millisecond

// For polls cond until it holds; after timeout it fails t saying what it
// waited for.
func For(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	Check(t, timeout, func() error {
		if cond() {
			return nil
		}
		return errors.New("timed out waiting for " + what)
	})
}

// Check polls check until it returns nil; after timeout it fails t with the
// last error.
func Check(t testing.TB, timeout time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for interval := time.Millisecond; ; interval = min(2*interval, maxInterval) {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %v", timeout, err)
		}
		time.Sleep(interval)
	}
}
