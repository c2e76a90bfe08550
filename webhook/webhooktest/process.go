package webhooktest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/test/repo"
	"github.com/ebb-dev/ebb/webhook"
)

// Process is an ebb-webhook binary running against the test API server.
type Process struct {
	Names   groupsuffix.Names
	Install *envtest.WebhookInstallOptions
	// MetricsAddr serves the process's /metrics.
	MetricsAddr string
	cmd         *exec.Cmd
	dir         string
	done        chan error
}

// BuildWebhook builds cmd/ebb-webhook into dir and returns the binary's path.
func BuildWebhook(dir string) (string, error) {
	root, err := repo.Root()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "ebb-webhook")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/ebb-webhook")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/ebb-webhook: %w\n%s", err, out)
	}
	return bin, nil
}

// StartProcess runs bin (an ebb-webhook) as its own process, the way a
// cluster runs it: kubeconfig of an envtest user, serving certificate from
// envtest's WebhookInstallOptions in files mode. Its output goes to logFile.
func StartProcess(env *Env, bin, suffix string, failurePolicy admissionregistrationv1.FailurePolicyType, logFile string, extraArgs ...string) (*Process, error) {
	names, err := groupsuffix.New(suffix)
	if err != nil {
		return nil, err
	}
	wio, err := prepare(names, failurePolicy)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "ebb-webhook-process-")
	if err != nil {
		return nil, fmt.Errorf("temp dir: %w", err)
	}
	user, err := env.AddUser(envtest.User{Name: "ebb-webhook-" + suffix, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return nil, fmt.Errorf("add envtest user: %w", err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
		return nil, fmt.Errorf("write kubeconfig: %w", err)
	}
	metricsPort, err := freePort()
	if err != nil {
		return nil, err
	}
	p := &Process{Names: names, Install: wio, dir: dir, done: make(chan error, 1),
		MetricsAddr: "127.0.0.1:" + strconv.Itoa(metricsPort)}
	args := append([]string{
		"--api-group-suffix=" + suffix, "--kubeconfig=" + kubeconfig,
		"--webhook-host=" + wio.LocalServingHost, "--webhook-port=" + strconv.Itoa(wio.LocalServingPort),
		"--cert-dir=" + wio.LocalServingCertDir,
		"--metrics-bind-address=" + p.MetricsAddr, "--health-probe-bind-address=0",
		"--sidecar-image=ghcr.io/ebb-dev/ebb-sidecar:test", "--log-format=text",
	}, extraArgs...)
	log, err := os.Create(logFile)
	if err != nil {
		return nil, fmt.Errorf("log file: %w", err)
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = log, log
	if err := p.cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	go func() {
		p.done <- p.cmd.Wait()
		log.Close()
	}()
	if err := wio.Install(env.Config); err != nil {
		_ = p.Stop()
		return nil, fmt.Errorf("install webhook configuration: %w", err)
	}
	inst := &Instance{Names: names, Install: wio, done: p.done}
	if err := inst.waitServing(); err != nil {
		_ = p.Stop()
		return nil, fmt.Errorf("%w (log: %s)", err, logFile)
	}
	return p, nil
}

// Stop sends SIGTERM and waits for the process to exit.
func (p *Process) Stop() error {
	defer os.RemoveAll(p.dir)
	defer p.Install.Cleanup()
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case err := <-p.done:
		return err
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		return fmt.Errorf("ebb-webhook did not stop within 30s")
	}
}

// prepare makes the instance's webhook configuration with envtest's
// WebhookInstallOptions: a CA, a serving certificate for 127.0.0.1, a free
// port, and a URL client config. Install it with the returned options.
func prepare(names groupsuffix.Names, failurePolicy admissionregistrationv1.FailurePolicyType) (*envtest.WebhookInstallOptions, error) {
	path := webhook.InjectPath
	mwc := webhook.Configuration(names, webhook.ConfigurationOptions{
		FailurePolicy: failurePolicy,
		ClientConfig:  admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Name: "ebb-webhook", Namespace: "ebb-system", Path: &path}},
	})
	vpath := webhook.ValidatePolicyPath
	vwc := webhook.ValidatingConfiguration(names, webhook.ConfigurationOptions{
		ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Name: "ebb-webhook", Namespace: "ebb-system", Path: &vpath}},
	})
	wio := &envtest.WebhookInstallOptions{MutatingWebhooks: []*admissionregistrationv1.MutatingWebhookConfiguration{mwc},
		ValidatingWebhooks: []*admissionregistrationv1.ValidatingWebhookConfiguration{vwc}, LocalServingHost: "127.0.0.1"}
	if err := wio.PrepWithoutInstalling(); err != nil {
		return nil, fmt.Errorf("prepare webhook install: %w", err)
	}
	// envtest joins host:port and the path with an extra slash; use the
	// clean URLs.
	url := fmt.Sprintf("https://127.0.0.1:%d%s", wio.LocalServingPort, path)
	mwc.Webhooks[0].ClientConfig.URL = &url
	vurl := fmt.Sprintf("https://127.0.0.1:%d%s", wio.LocalServingPort, vpath)
	vwc.Webhooks[0].ClientConfig.URL = &vurl
	return wio, nil
}
