package webhooktest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/internal/logging"
	"github.com/ebb-dev/ebb/test/repo"
	"github.com/ebb-dev/ebb/webhook"
)

// Assets returns the directory of kube-apiserver and etcd: $KUBEBUILDER_ASSETS,
// else <root>/bin/k8s, created with symlinks to <root>/bin/kube-apiserver and
// the etcd on PATH when missing. The error says how to get them.
func Assets() (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir, checkAssets(dir)
	}
	root, err := repo.Root()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(root, "bin", "k8s")
	if checkAssets(dir) == nil {
		return dir, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("create %s: %w", dir, err)
	}
	apiserver := filepath.Join(root, "bin", "kube-apiserver")
	if _, err := os.Stat(apiserver); err != nil {
		return "", fmt.Errorf("envtest needs kube-apiserver: %s is missing (make test builds it, or set KUBEBUILDER_ASSETS)", apiserver)
	}
	etcd, err := exec.LookPath("etcd")
	if err != nil {
		return "", fmt.Errorf("envtest needs etcd on PATH (apt-get install etcd-server, or set KUBEBUILDER_ASSETS): %w", err)
	}
	for name, target := range map[string]string{"kube-apiserver": apiserver, "etcd": etcd} {
		link := filepath.Join(dir, name)
		_ = os.Remove(link) // a dangling link from an older layout
		if err := os.Symlink(target, link); err != nil {
			return "", fmt.Errorf("link %s: %w", link, err)
		}
	}
	return dir, checkAssets(dir)
}

func checkAssets(dir string) error {
	for _, name := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("envtest assets %s: %s missing (make test provides them; or set KUBEBUILDER_ASSETS)", dir, name)
		}
	}
	return nil
}

// CRDs are the generated CRDs of every instance (config/crd: AppRoute,
// DomainClaim and RoutePolicy) moved to group.
func CRDs(group string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	root, err := repo.Root()
	if err != nil {
		return nil, err
	}
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, resource := range []string{routingv1alpha1.Resource, routingv1alpha1.DomainClaimResource, routingv1alpha1.RoutePolicyResource} {
		path := filepath.Join(root, "config", "crd", routingv1alpha1.DefaultGroup+"_"+resource+".yaml")
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("read CRD: %w", err)
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.UnmarshalStrict(b, &crd); err != nil {
			return nil, fmt.Errorf("decode %s: %w", path, err)
		}
		crd.Spec.Group = group
		crd.Name = crd.Spec.Names.Plural + "." + group
		out = append(out, &crd)
	}
	return out, nil
}

// Env is a running kube-apiserver with the CRDs of each suffix.
type Env struct {
	*envtest.Environment
	Config *rest.Config
}

// Start starts the API server. extraArgs are more kube-apiserver flags.
func Start(suffixes []string, extraArgs ...string) (*Env, error) {
	assets, err := Assets()
	if err != nil {
		return nil, err
	}
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, s := range suffixes {
		n, err := groupsuffix.New(s)
		if err != nil {
			return nil, err
		}
		cs, err := CRDs(n.Group())
		if err != nil {
			return nil, err
		}
		crds = append(crds, cs...)
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDs:                  crds,
		ErrorIfCRDPathMissing: true,
	}
	args := env.ControlPlane.GetAPIServer().Configure()
	for i := 0; i+1 < len(extraArgs); i += 2 {
		args.Append(extraArgs[i], extraArgs[i+1])
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("start envtest (assets %s): %w", assets, err)
	}
	return &Env{Environment: env, Config: cfg}, nil
}

// Instance is one running ebb-webhook.
type Instance struct {
	Names   groupsuffix.Names
	Install *envtest.WebhookInstallOptions
	cancel  context.CancelFunc
	done    chan error
}

// StartInstance registers the instance's MutatingWebhookConfiguration with
// envtest's WebhookInstallOptions (which serves it at a local port with its
// own CA) and runs webhook.Run against it. mod adjusts the options.
func StartInstance(env *Env, suffix string, failurePolicy admissionregistrationv1.FailurePolicyType, mod func(*webhook.Options)) (*Instance, error) {
	names, err := groupsuffix.New(suffix)
	if err != nil {
		return nil, err
	}
	wio, err := prepare(names, failurePolicy)
	if err != nil {
		return nil, err
	}

	opts := webhook.DefaultOptions()
	opts.GroupSuffix = suffix
	opts.RESTConfig = env.Config
	opts.WebhookHost, opts.WebhookPort, opts.CertDir = wio.LocalServingHost, wio.LocalServingPort, wio.LocalServingCertDir
	opts.MetricsAddr, opts.HealthAddr = "0", "0"
	opts.Log.Format = logging.FormatText
	opts.SidecarImage = "ghcr.io/ebb-dev/ebb-sidecar:test"
	if mod != nil {
		mod(&opts)
	}
	ctx, cancel := context.WithCancel(context.Background())
	inst := &Instance{Names: names, Install: wio, cancel: cancel, done: make(chan error, 1)}
	go func() { inst.done <- webhook.Run(ctx, opts) }()
	if err := wio.Install(env.Config); err != nil {
		inst.Stop()
		return nil, fmt.Errorf("install webhook configuration: %w", err)
	}
	if err := inst.waitServing(); err != nil {
		_ = inst.Stop()
		return nil, err
	}
	return inst, nil
}

// waitServing waits until the webhook answers TLS handshakes with the
// certificate envtest made for it.
func (i *Instance) waitServing() error {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(i.Install.LocalServingCAData)
	addr := net.JoinHostPort(i.Install.LocalServingHost, strconv.Itoa(i.Install.LocalServingPort))
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-i.done:
			i.done <- err
			return fmt.Errorf("webhook %s stopped: %w", i.Names.Suffix(), err)
		default:
		}
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", addr, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
		if err == nil {
			return conn.Close()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("webhook %s not serving on %s after 30s: %w", i.Names.Suffix(), addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop stops the instance and waits for it.
func (i *Instance) Stop() error {
	i.cancel()
	select {
	case err := <-i.done:
		_ = i.Install.Cleanup()
		return err
	case <-time.After(30 * time.Second):
		return errors.New("webhook did not stop within 30s")
	}
}

// StartSelfSignedInstance runs an instance in self-signed TLS mode, as on a
// cluster without cert-manager: the test installs its webhook configuration
// without caBundle (as the chart would), and the instance makes its CA and
// certificate, keeps them in a Secret in namespace and sets the caBundle.
func StartSelfSignedInstance(env *Env, suffix, namespace string, failurePolicy admissionregistrationv1.FailurePolicyType, mod func(*webhook.Options)) (*Instance, error) {
	names, err := groupsuffix.New(suffix)
	if err != nil {
		return nil, err
	}
	c, err := client.New(env.Config, client.Options{})
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	ctx := context.Background()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); client.IgnoreAlreadyExists(err) != nil {
		return nil, fmt.Errorf("create namespace %s: %w", namespace, err)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	url := fmt.Sprintf("https://127.0.0.1:%d%s", port, webhook.InjectPath)
	mwc := webhook.Configuration(names, webhook.ConfigurationOptions{FailurePolicy: failurePolicy, ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url}})
	if err := c.Create(ctx, mwc); err != nil {
		return nil, fmt.Errorf("create webhook configuration: %w", err)
	}
	vurl := fmt.Sprintf("https://127.0.0.1:%d%s", port, webhook.ValidatePolicyPath)
	vwc := webhook.ValidatingConfiguration(names, webhook.ConfigurationOptions{ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &vurl}})
	if err := c.Create(ctx, vwc); err != nil {
		return nil, fmt.Errorf("create validating webhook configuration: %w", err)
	}
	certDir, err := os.MkdirTemp("", "ebb-webhook-selfsigned-")
	if err != nil {
		return nil, fmt.Errorf("cert dir: %w", err)
	}
	opts := webhook.DefaultOptions()
	opts.GroupSuffix = suffix
	opts.RESTConfig = env.Config
	opts.TLSMode = webhook.TLSSelfSigned
	opts.Namespace = namespace
	opts.ExtraSANs = []string{"127.0.0.1"}
	opts.WebhookHost, opts.WebhookPort, opts.CertDir = "127.0.0.1", port, certDir
	opts.MetricsAddr, opts.HealthAddr = "0", "0"
	opts.Log.Format = logging.FormatText
	opts.SidecarImage = "ghcr.io/ebb-dev/ebb-sidecar:test"
	if mod != nil {
		mod(&opts)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	inst := &Instance{Names: names, cancel: cancel, done: make(chan error, 1),
		Install: &envtest.WebhookInstallOptions{LocalServingHost: "127.0.0.1", LocalServingPort: port, LocalServingCertDir: certDir}}
	go func() { inst.done <- webhook.Run(runCtx, opts) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var got admissionregistrationv1.MutatingWebhookConfiguration
		if err := c.Get(ctx, client.ObjectKeyFromObject(mwc), &got); err == nil && len(got.Webhooks[0].ClientConfig.CABundle) > 0 {
			inst.Install.LocalServingCAData = got.Webhooks[0].ClientConfig.CABundle
			break
		}
		if time.Now().After(deadline) {
			_ = inst.Stop()
			return nil, fmt.Errorf("instance %s did not set the caBundle of %s within 30s", suffix, mwc.Name)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := inst.waitServing(); err != nil {
		_ = inst.Stop()
		return nil, err
	}
	return inst, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
