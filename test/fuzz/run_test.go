package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// ciRace is what make test printed in CI when the coordinator reported its
// own deadline (stop 38), trimmed to the fuzz run's lines.
const ciRace = `fuzz: elapsed: 0s, gathering baseline coverage: 0/385 completed
fuzz: elapsed: 2s, gathering baseline coverage: 385/385 completed, now fuzzing with 2 workers
fuzz: elapsed: 15s, execs: 175225 (12547/sec), new interesting: 2 (total: 387)
fuzz: elapsed: 15s, execs: 175225 (0/sec), new interesting: 2 (total: 387)
--- FAIL: FuzzDifferentialRequest (15.09s)
    context deadline exceeded
FAIL
exit status 1
FAIL	github.com/ebb-dev/ebb/internal/http1	15.110s
`

func TestOnlyTheCoordinatorsDeadline(t *testing.T) {
	for _, tc := range []struct {
		name, output string
		want         bool
	}{
		{"the race, as CI printed it", ciRace, true},
		{"a failing input found", `fuzz: elapsed: 3s, execs: 100 (33/sec), new interesting: 1 (total: 2)
--- FAIL: FuzzDifferentialRequest (3.01s)
    --- FAIL: FuzzDifferentialRequest (0.00s)
        differential_test.go:80: ebb accepted what net/http refused
    Failing input written to testdata/fuzz/FuzzDifferentialRequest/1f2e
    To re-run:
    go test -run=FuzzDifferentialRequest/1f2e
FAIL
exit status 1
FAIL	github.com/ebb-dev/ebb/internal/http1	3.020s
`, false},
		{"a seed that fails", `failure while testing seed corpus entry: FuzzDifferentialRequest/seed#0
--- FAIL: FuzzDifferentialRequest (0.01s)
    --- FAIL: FuzzDifferentialRequest (0.00s)
        differential_test.go:80: bad
FAIL
`, false},
		{"a worker that hung", `--- FAIL: FuzzDifferentialRequest (20.00s)
    fuzzing process hung or terminated unexpectedly: exit status 2
FAIL
`, false},
		{"the deadline and a panic", "panic: boom\n" + ciRace, false},
		{"the deadline reported for another target", strings.ReplaceAll(ciRace, "--- FAIL: FuzzDifferentialRequest", "--- FAIL: FuzzOther"), false},
		{"the deadline and another test's failure", ciRace + "--- FAIL: TestSomething (0.00s)\n    something_test.go:1: no\n", false},
		{"a build failure", "# github.com/ebb-dev/ebb/internal/http1\n./x.go:1:1: syntax error\nFAIL\tgithub.com/ebb-dev/ebb/internal/http1 [build failed]\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := onlyTheCoordinatorsDeadline(tc.output, "FuzzDifferentialRequest"); got != tc.want {
				t.Errorf("onlyTheCoordinatorsDeadline = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestRun fuzzes real targets with the go command: one that never fails
// passes (whether or not the coordinator reports its deadline), and one
// whose seed fails stops the run before the targets after it.
func TestRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and fuzzes test targets")
	}
	pass := target{pkg: "test/fuzz/testdata/targets", name: "FuzzNeverFails"}
	fail := target{pkg: "test/fuzz/testdata/targets", name: "FuzzFailsOnX"}
	t.Chdir("../..") // the module root, where make runs the program
	o := options{fuzztime: time.Second, goCmd: "go", targets: []target{pass}}
	var out bytes.Buffer
	if err := run(context.Background(), o, &out); err != nil {
		t.Fatalf("run(%s) = %v, want nil; output:\n%s", pass, err, &out)
	}

	o.targets = []target{fail, pass}
	out.Reset()
	err := run(context.Background(), o, &out)
	if err == nil || !strings.Contains(err.Error(), fail.String()) || !strings.Contains(out.String(), "the input x") {
		t.Fatalf("run(%s, %s) = %v, want an error naming %s after its seed failed; output:\n%s", fail, pass, err, fail, &out)
	}
	if strings.Contains(out.String(), ">> fuzz "+pass.String()) {
		t.Errorf("run went on to %s after %s failed:\n%s", pass, fail, &out)
	}
}
