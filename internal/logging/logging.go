// Package logging is the one log set-up of ebb's binaries: logr over the
// standard library's log/slog, JSON or text, at one of four levels. A
// binary calls Setup once; the binaries that talk to the API server call
// logroute.Setup instead, which also routes client-go's, controller-runtime's
// and gRPC's logs into it, so every line a process writes has one format.
package logging

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/go-logr/logr"

	"github.com/ebb-dev/ebb/internal/options"
)

// Levels and formats, as --log-level and --log-format take them.
const (
	LevelDebug = "debug"
	LevelInfo  = "info"
	LevelWarn  = "warn"
	LevelError = "error"

	FormatJSON = "json"
	FormatText = "text"
)

// Options are the log flags every binary has.
type Options struct {
	Level  string // debug, info, warn or error
	Format string // json or text
}

// DefaultOptions log at info, as JSON.
func DefaultOptions() Options { return Options{Level: LevelInfo, Format: FormatJSON} }

// Bind adds --log-level and --log-format to s.
func (o *Options) Bind(s *options.Set) {
	s.String(&o.Level, "log-level", "debug, info, warn or error")
	s.String(&o.Format, "log-format", "json or text")
}

// Validate returns every problem of o, naming the flags.
func (o Options) Validate() error {
	var problems []error
	if _, ok := levels[o.Level]; !ok {
		problems = append(problems, fmt.Errorf("--log-level %q: want debug, info, warn or error", o.Level))
	}
	if o.Format != FormatJSON && o.Format != FormatText {
		problems = append(problems, fmt.Errorf("--log-format %q: want json or text", o.Format))
	}
	return errors.Join(problems...)
}

// Debug reports whether o logs debug lines.
func (o Options) Debug() bool { return o.Level == LevelDebug }

var levels = map[string]slog.Level{
	LevelDebug: slog.LevelDebug, LevelInfo: slog.LevelInfo, LevelWarn: slog.LevelWarn, LevelError: slog.LevelError,
}

// Setup returns the logger of the binary named name: its lines go to
// standard error as o says (validated). It routes no library's logs (see
// logroute.Setup).
func Setup(name string, o Options) logr.Logger { return New(os.Stderr, name, o) }

// New returns a logger named name writing to w as o says (validated).
// logr's V(1) and above are debug lines.
func New(w io.Writer, name string, o Options) logr.Logger {
	hopts := &slog.HandlerOptions{Level: levels[o.Level], ReplaceAttr: debugLevelName}
	var h slog.Handler
	if o.Format == FormatText {
		h = slog.NewTextHandler(w, hopts)
	} else {
		h = slog.NewJSONHandler(w, hopts)
	}
	return logr.FromSlogHandler(h).WithName(name)
}

// debugLevelName writes logr's V(n) (slog level -n) as DEBUG, not
// "DEBUG+3".
func debugLevelName(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 && a.Key == slog.LevelKey {
		if l, ok := a.Value.Any().(slog.Level); ok && l < slog.LevelInfo {
			a.Value = slog.StringValue(slog.LevelDebug.String())
		}
	}
	return a
}
