package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"math/big"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ebb-dev/ebb/test/cluster"
	"github.com/ebb-dev/ebb/test/e2e/install"
)

// certManagerModule holds cert-manager's CRDs (deploy/crds); `make tools`
// downloads it.
const certManagerModule = "github.com/cert-manager/cert-manager@v1.21.2"

// TestCertManagerMode installs a second release in the chart's cert-manager
// TLS mode (certManager.enabled=true) against cert-manager's real CRDs. The
// chart's Issuers and Certificates are created by Helm; install.CertManager
// stands in for cert-manager's controllers (not buildable from the module
// proxy) and writes the serving certificate's Secret as cert-manager does,
// and the caBundle as cainjector does. The webhook serves that certificate
// from the mounted Secret; when the Secret is renewed it serves the new one
// without a restart, and admission through the API server keeps working.
func TestCertManagerMode(t *testing.T) {
	ctx := t.Context()
	if err := lc.ApplyCRDs(ctx, filepath.Join(cluster.MustModuleDir(t, certManagerModule), "deploy", "crds")); err != nil {
		t.Fatal(err)
	}
	cm, err := install.NewCertManager(lc)
	if err != nil {
		t.Fatal(err)
	}
	const release, ns, suffix = "cm", "cm-ebb", "cm.example.com"
	type installed struct {
		r   *install.Release
		err error
	}
	done := make(chan installed, 1)
	go func() {
		r, err := install.Install(ctx, lc, install.Options{Release: release, Namespace: ns, GroupSuffix: suffix, Logf: t.Logf,
			Set: []string{"certManager.enabled=true", "webhook.replicas=1", "activator.replicas=1", "scaler.replicas=1"}})
		done <- installed{r, err}
	}()
	certName := release + "-ebb-webhook"
	first, err := cm.Issue(ctx, ns, certName)
	if err != nil {
		t.Fatal(err)
	}
	if err := cm.InjectCA(ctx, "sidecar-injector."+suffix); err != nil {
		t.Fatal(err)
	}
	in := <-done
	if in.r != nil {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := in.r.Uninstall(ctx, lc); err != nil {
				t.Errorf("uninstall: %v", err)
			}
		})
	}
	if in.err != nil {
		t.Fatalf("install in cert-manager mode: %v", in.err)
	}
	r := in.r

	pods, err := lc.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var webhook corev1.Pod
	for _, p := range pods.Items {
		if strings.HasPrefix(p.Name, r.Fullname+"-webhook-") && p.DeletionTimestamp == nil {
			webhook = p
		}
	}
	addr := fmt.Sprintf("%s:%d", webhook.Status.PodIP, 9443)
	if got := servedSerial(t, addr); got.Cmp(first) != 0 {
		t.Fatalf("the webhook serves serial %x, want %x from the Secret", got, first)
	}
	t.Logf("webhook %s serves the certificate of Secret %s/%s-ebb-webhook-tls (serial %x)", webhook.Name, ns, release, first)
	admitted(t, r, "e2e-cm")

	// Renewal: cert-manager writes a new key and certificate into the Secret.
	second, err := cm.Issue(ctx, ns, certName)
	if err != nil {
		t.Fatal(err)
	}
	renewed := time.Now()
	if err := cluster.WaitFor(ctx, 90*time.Second, "the webhook to serve the renewed certificate", func(context.Context) (bool, error) {
		return servedSerial(t, addr).Cmp(second) == 0, nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("renewed Secret served %v after it was written (serial %x)", time.Since(renewed).Round(time.Millisecond), second)
	now, err := lc.Client.CoreV1().Pods(ns).Get(ctx, webhook.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if restarts(now) != restarts(&webhook) {
		t.Errorf("the webhook restarted to load the renewed certificate (%d → %d restarts)", restarts(&webhook), restarts(now))
	}
	admitted(t, r, "e2e-cm")
}

// servedSerial is the serial number of the certificate served at addr.
func servedSerial(t *testing.T, addr string) *big.Int {
	t.Helper()
	conn, err := tls.DialWithDialer(&netDialer, "tcp", addr, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Logf("TLS to the webhook at %s: %v", addr, err)
		return big.NewInt(0)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber
}

// admitted creates (dry run) an opted-in pod in namespace ns, through the
// API server that calls the release's webhook over TLS, and checks that it
// comes back with the sidecar.
func admitted(t *testing.T, r *install.Release, ns string) {
	t.Helper()
	ctx := t.Context()
	if err := lc.EnsureNamespace(ctx, ns, r.OptIn()); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "tls-check", Namespace: ns, Labels: map[string]string{r.Names.AppLabel(): "tls-check"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "ghcr.io/ebb-dev/ebb-test-app:dev", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}}},
	}
	install.Restrict(&pod.Spec)
	got, err := lc.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		t.Fatalf("admission through the API server: %v", err)
	}
	if len(got.Spec.InitContainers) != 1 || got.Spec.InitContainers[0].Name != "ebb-sidecar" {
		t.Fatalf("the opted-in pod came back without the sidecar: %v", got.Spec.InitContainers)
	}
}

func restarts(p *corev1.Pod) int32 {
	var n int32
	for _, s := range p.Status.ContainerStatuses {
		n += s.RestartCount
	}
	return n
}

var netDialer = net.Dialer{Timeout: 2 * time.Second}
