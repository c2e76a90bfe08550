// Command fuzz is what `make fuzz` (and the end of `make test`) runs: each
// fuzz target, given as <package>:<Target>, for --fuzztime (env FUZZTIME,
// default 5m), one after another, stopping at the first that fails.
//
// A target fails when go test finds a failing input (it writes it to the
// package's testdata/fuzz/<Target>, and that file fails go test from then
// on), or when go test fails in any other way, with one exception. Go's
// fuzzing coordinator can report its own -fuzztime deadline as the
// failure "context deadline exceeded" on a loaded machine, having found
// nothing (golang/go#51484: it compares the parent and child contexts'
// errors in a window where only the parent's is set). When go test's only
// complaint is that bare deadline and no failing input was written, the
// target's corpus (its f.Add seeds and testdata/fuzz) is replayed with
// go test -run, and the target passes only if the replay does; the run
// says so in its output.
package main
