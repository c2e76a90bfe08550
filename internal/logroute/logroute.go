// Package logroute sends the logs of the libraries ebb's control-plane
// binaries use into the binary's own logger, so every line a process writes
// has one format: client-go's klog, controller-runtime's, gRPC's and the
// standard library's log (net/http's server errors, among others).
package logroute

import (
	"flag"
	"fmt"
	"log"
	"log/slog"
	"strconv"

	"github.com/go-logr/logr"
	"google.golang.org/grpc/grpclog"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/ebb-dev/ebb/internal/logging"
)

// Setup returns the logger of the control-plane binary named name
// (logging.Setup) with every library's lines routed into it (All), at the
// detail o's level asks for. A binary calls it once, before anything logs.
func Setup(name string, o logging.Options) logr.Logger {
	log := logging.Setup(name, o)
	All(log, o.Debug())
	return log
}

// DebugVerbosity is the klog and gRPC verbosity kept when a binary logs at
// debug: client-go's steady-state detail (leader election, informers), not
// every request.
const DebugVerbosity = 2

// All routes every library's lines to logger. With debug, their detail up
// to DebugVerbosity is kept; without, only what they log unconditionally.
func All(logger logr.Logger, debug bool) {
	v := 0
	if debug {
		v = DebugVerbosity
	}
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("v", strconv.Itoa(v)) // a valid level: cannot fail
	klog.SetLogger(logger.WithName("client-go"))
	ctrllog.SetLogger(logger)
	grpclog.SetLoggerV2(grpcLogger{log: logger.WithName("grpc"), v: v})
	slog.SetDefault(slog.New(logr.ToSlogHandler(logger)))
	log.SetFlags(0) // slog adds the time
}

// grpcLogger is grpclog.LoggerV2 over logr: gRPC's info lines are debug
// lines (V(1)), its warnings info lines with severity=warning.
type grpcLogger struct {
	log logr.Logger
	v   int
}

func (g grpcLogger) Info(args ...any)                 { g.log.V(1).Info(fmt.Sprint(args...)) }
func (g grpcLogger) Infoln(args ...any)               { g.log.V(1).Info(fmt.Sprint(args...)) }
func (g grpcLogger) Infof(format string, args ...any) { g.log.V(1).Info(fmt.Sprintf(format, args...)) }
func (g grpcLogger) Warning(args ...any)              { g.warn(fmt.Sprint(args...)) }
func (g grpcLogger) Warningln(args ...any)            { g.warn(fmt.Sprint(args...)) }
func (g grpcLogger) Warningf(format string, args ...any) {
	g.warn(fmt.Sprintf(format, args...))
}
func (g grpcLogger) Error(args ...any)   { g.log.Error(nil, fmt.Sprint(args...)) }
func (g grpcLogger) Errorln(args ...any) { g.log.Error(nil, fmt.Sprint(args...)) }
func (g grpcLogger) Errorf(format string, args ...any) {
	g.log.Error(nil, fmt.Sprintf(format, args...))
}
func (g grpcLogger) Fatal(args ...any)                 { g.fatal(fmt.Sprint(args...)) }
func (g grpcLogger) Fatalln(args ...any)               { g.fatal(fmt.Sprint(args...)) }
func (g grpcLogger) Fatalf(format string, args ...any) { g.fatal(fmt.Sprintf(format, args...)) }
func (g grpcLogger) V(l int) bool                      { return l <= g.v }

func (g grpcLogger) warn(msg string) { g.log.Info(msg, "severity", "warning") }

// fatal logs and exits, as grpclog's Fatal must.
func (g grpcLogger) fatal(msg string) {
	g.log.Error(nil, msg, "severity", "fatal")
	log.Fatal(msg)
}
