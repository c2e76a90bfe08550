package options

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestMainExitCodes runs Main in a child process (this test binary,
// re-executed): help exits 0 and prints to stdout, bad options exit 2
// naming the problem, a run error exits 1.
func TestMainExitCodes(t *testing.T) {
	if mode := os.Getenv("EBB_TEST_MAIN"); mode != "" {
		os.Args = append([]string{"prog"}, strings.Fields(mode)...)
		Main("prog", func() mainOptions { return mainOptions{Count: 3} }, func(context.Context, mainOptions) error {
			return errors.New("run failed")
		})
		return
	}
	for _, tc := range []struct {
		args, stdout, stderr string
		code                 int
	}{
		{args: "-h", code: 0, stdout: "Usage of prog"},
		{args: "--count=x", code: 2, stderr: "prog: invalid options"},
		{args: "--count=1", code: 1, stderr: "prog: run failed"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestMainExitCodes$")
		cmd.Env = append(os.Environ(), "EBB_TEST_MAIN="+tc.args)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != tc.code || !strings.Contains(stdout.String(), tc.stdout) || !strings.Contains(stderr.String(), tc.stderr) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit %d, stdout with %q, stderr with %q",
				tc.args, code, stdout.String(), stderr.String(), tc.code, tc.stdout, tc.stderr)
		}
	}
}

type mainOptions struct{ Count int }

func (o *mainOptions) Bind(s *Set) { s.Int(&o.Count, "count", "a count") }

func (o *mainOptions) Validate() error { return nil }
