package sidecar

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ebb-dev/ebb/internal/sidecarapi"
	"github.com/ebb-dev/ebb/internal/testwait"
)

const mainPkg = "github.com/ebb-dev/ebb/cmd/ebb-sidecar"

// TestNoKubernetesClientInDependencies keeps the sidecar small: it must not
// link client-go or controller-runtime (or anything of apimachinery).
func TestNoKubernetesClientInDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", mainPkg).Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 50 {
		t.Fatalf("go list -deps returned only %d packages: %q", len(deps), deps)
	}
	var bad []string
	for _, d := range deps {
		for _, forbidden := range []string{"k8s.io/client-go", "sigs.k8s.io/controller-runtime", "k8s.io/apimachinery", "google.golang.org/grpc"} {
			if d == forbidden || strings.HasPrefix(d, forbidden+"/") {
				bad = append(bad, d)
			}
		}
	}
	if len(bad) > 0 {
		t.Errorf("ebb-sidecar links %d forbidden packages: %q", len(bad), bad)
	}
}

// TestBinary builds the stripped binary, checks its size, and drains it
// with a real SIGTERM while a request is in flight.
func TestBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "ebb-sidecar")
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, mainPkg)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	fi, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	const maxSize = 15_000_000
	if fi.Size() > maxSize {
		t.Errorf("stripped binary is %d bytes, more than %d", fi.Size(), maxSize)
	}
	t.Logf("stripped binary: %.1f MB", float64(fi.Size())/1e6)

	app := startTestApp(t)
	listen, admin := freePort(t), freePort(t)
	cmd := exec.Command(bin, "--listen", listen, "--admin-listen", admin, "--drain-timeout", "10s")
	cmd.Env = append(os.Environ(), "EBB_UPSTREAM="+app.addr, "POD_NAME=test-pod")
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	logs := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logs <- sc.Text()
		}
		close(logs)
	}()
	testwait.For(t, 5*time.Second, "ready", func() bool {
		resp, err := http.Get("http://" + admin + sidecarapi.ReadyPath)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	result := make(chan string, 1)
	go func() {
		resp, err := http.Get("http://" + listen + "/slow?d=800ms")
		if err != nil {
			result <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		result <- fmt.Sprintf("%d %s", resp.StatusCode, b)
	}()
	testwait.For(t, 5*time.Second, "request in flight", func() bool {
		resp, err := http.Get("http://" + admin + sidecarapi.StatsPath)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		s, err := sidecarapi.ParseSnapshot(b)
		return err == nil && s.InFlight == 1
	})
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if got := <-result; got != "200 slow done\n" {
		t.Errorf("request in flight at SIGTERM: %q", got)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case err := <-waited:
		if err != nil {
			t.Errorf("exit after drain: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("did not exit after the drain")
	}
	var all []string
	for l := range logs {
		all = append(all, l)
	}
	joined := strings.Join(all, "\n")
	for _, want := range []string{`"msg":"draining"`, `"msg":"drained"`, `"pod":"test-pod"`} {
		if !strings.Contains(joined, want) {
			t.Errorf("logs lack %s:\n%s", want, joined)
		}
	}
}

func TestBinaryRejectsBadOptions(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go run")
	}
	out, err := exec.Command("go", "run", mainPkg, "--upstream", "x", "--drain-timeout", "-1s").CombinedOutput()
	if err == nil {
		t.Fatalf("bad options accepted:\n%s", out)
	}
	for _, want := range []string{"--upstream", "--drain-timeout"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output does not name %s:\n%s", want, out)
		}
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
