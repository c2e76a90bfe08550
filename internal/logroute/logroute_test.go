package logroute

import (
	"bytes"
	"io"
	"log"
	"os"
	"strings"
	"testing"

	"google.golang.org/grpc/grpclog"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/ebb-dev/ebb/internal/logging"
)

// client-go's klog lines, controller-runtime's, gRPC's and the standard
// library's come out as the binary's own JSON lines, their detail only at
// debug.
func TestRouteLogs(t *testing.T) {
	for i, level := range []string{logging.LevelInfo, logging.LevelDebug} {
		var b bytes.Buffer
		All(logging.New(&b, "prog", logging.Options{Level: level, Format: logging.FormatJSON}), level == logging.LevelDebug)
		klog.InfoS("from klog")
		klog.V(2).InfoS("klog detail")
		ctrllog.Log.Info("from controller-runtime")
		grpclog.Warning("from grpc")
		grpclog.Info("grpc detail")
		log.Print("from the standard library")
		klog.Flush()
		out := b.String()
		for _, want := range []string{`"msg":"from klog"`, `"logger":"prog/client-go"`, `"msg":"from controller-runtime"`, `"msg":"from grpc","logger":"prog/grpc","severity":"warning"`, `"msg":"from the standard library"`} {
			if i > 0 && strings.Contains(want, "controller-runtime") {
				continue // controller-runtime takes the first logger a process sets, only
			}
			if !strings.Contains(out, want) {
				t.Errorf("%s: output lacks %s:\n%s", level, want, out)
			}
		}
		for _, detail := range []string{"klog detail", "grpc detail"} {
			if got, want := strings.Contains(out, detail), level == logging.LevelDebug; got != want {
				t.Errorf("%s: %q written: %v, want %v:\n%s", level, detail, got, want, out)
			}
		}
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if !strings.HasPrefix(l, "{") {
				t.Errorf("%s: a line that is not JSON: %q", level, l)
			}
		}
	}
}

// Setup's logger writes the binary's lines and client-go's to standard
// error, in its format and under its name.
func TestSetup(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := os.Stderr
	os.Stderr = w
	log := Setup("ebb-x", logging.Options{Level: logging.LevelInfo, Format: logging.FormatJSON})
	os.Stderr = stderr
	log.Info("own line")
	klog.InfoS("from klog")
	klog.Flush()
	w.Close()
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"msg":"own line"`, `"logger":"ebb-x"`, `"msg":"from klog"`, `"logger":"ebb-x/client-go"`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("standard error lacks %s:\n%s", want, out)
		}
	}
}
