package testwait

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// recorder is a testing.TB that records a failure instead of stopping the
// goroutine the way Fatalf does.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
	panic(r) // as Fatalf's runtime.Goexit, stop the caller
}

func run(f func(tb testing.TB)) (failed bool) {
	r := &recorder{}
	defer func() {
		if v := recover(); v != nil && v != any(r) {
			panic(v)
		}
		failed = r.failed != ""
	}()
	f(r)
	return false
}

func TestForWaitsUntilTheConditionHolds(t *testing.T) {
	start := time.Now()
	if run(func(tb testing.TB) {
		For(tb, time.Second, "30ms", func() bool { return time.Since(start) > 30*time.Millisecond })
	}) {
		t.Fatal("failed although the condition came to hold")
	}
	if d := time.Since(start); d < 30*time.Millisecond || d > 500*time.Millisecond {
		t.Errorf("returned after %s", d)
	}
}

func TestFailsAfterTheTimeout(t *testing.T) {
	start := time.Now()
	if !run(func(tb testing.TB) { Check(tb, 50*time.Millisecond, func() error { return errors.New("never") }) }) {
		t.Fatal("did not fail")
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Errorf("failed after %s, before the timeout", d)
	}
}
