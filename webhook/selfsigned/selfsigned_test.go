package selfsigned

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

func setup(t *testing.T) (client.Client, Options, *time.Time) {
	t.Helper()
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "sidecar-injector.ebb.dev"},
		Webhooks:   []admissionregistrationv1.MutatingWebhook{{Name: "inject.ebb.dev"}},
	}
	c := fake.NewClientBuilder().WithObjects(mwc).Build()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	o := Options{
		Namespace: "ebb-system", SecretName: "ebb-webhook-tls", CommonName: "ebb-webhook-ca.ebb.dev",
		Hosts:   append(ServiceHosts("ebb-webhook", "ebb-system"), "127.0.0.1"),
		CertDir: t.TempDir(), CertName: "tls.crt", KeyName: "tls.key",
		WebhookConfiguration: mwc.Name,
		Now:                  func() time.Time { return now },
	}
	return c, o, &now
}

type state struct {
	CA, Cert, File, CABundle string
}

func read(t *testing.T, c client.Client, o Options) state {
	t.Helper()
	ctx := context.Background()
	var s corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: o.Namespace, Name: o.SecretName}, &s); err != nil {
		t.Fatal(err)
	}
	var mwc admissionregistrationv1.MutatingWebhookConfiguration
	if err := c.Get(ctx, client.ObjectKey{Name: o.WebhookConfiguration}, &mwc); err != nil {
		t.Fatal(err)
	}
	file, err := os.ReadFile(filepath.Join(o.CertDir, o.CertName))
	if err != nil {
		t.Fatal(err)
	}
	return state{CA: string(s.Data[KeyCACert]), Cert: string(s.Data[corev1.TLSCertKey]), File: string(file), CABundle: string(mwc.Webhooks[0].ClientConfig.CABundle)}
}

func TestEnsureCreatesVerifiableCertificate(t *testing.T) {
	c, o, now := setup(t)
	notAfter, err := Ensure(context.Background(), c, o)
	if err != nil {
		t.Fatal(err)
	}
	if want := now.Add(ServingValidity); !notAfter.Equal(want) {
		t.Errorf("notAfter %s, want %s", notAfter, want)
	}
	st := read(t, c, o)
	if st.File != st.Cert || st.CABundle != st.CA {
		t.Fatalf("files or caBundle differ from the Secret")
	}
	pair, err := tls.LoadX509KeyPair(filepath.Join(o.CertDir, o.CertName), filepath.Join(o.CertDir, o.KeyName))
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM([]byte(st.CABundle))
	for _, host := range []string{"ebb-webhook.ebb-system.svc", "127.0.0.1"} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: host, CurrentTime: now.Add(time.Hour)}); err != nil {
			t.Errorf("verify for %s: %v", host, err)
		}
	}
}

func TestEnsureKeepsRenewsAndRotates(t *testing.T) {
	c, o, now := setup(t)
	ctx := context.Background()
	if _, err := Ensure(ctx, c, o); err != nil {
		t.Fatal(err)
	}
	first := read(t, c, o)

	// Another replica, or a restart, a month later: nothing changes.
	*now = now.Add(30 * 24 * time.Hour)
	if _, err := Ensure(ctx, c, o); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(first, read(t, c, o)); diff != "" {
		t.Errorf("a valid certificate was replaced (-before +after):\n%s", diff)
	}

	// Less than a third of its life left: a new serving certificate, same CA.
	*now = now.Add(250 * 24 * time.Hour)
	if _, err := Ensure(ctx, c, o); err != nil {
		t.Fatal(err)
	}
	renewed := read(t, c, o)
	if renewed.CA != first.CA || renewed.Cert == first.Cert || renewed.File != renewed.Cert {
		t.Errorf("renewal: CA kept %v, cert replaced %v, file updated %v; want true, true, true", renewed.CA == first.CA, renewed.Cert != first.Cert, renewed.File == renewed.Cert)
	}

	// A new host name: a new serving certificate.
	o.Hosts = append(o.Hosts, "webhook.example.com")
	if _, err := Ensure(ctx, c, o); err != nil {
		t.Fatal(err)
	}
	if got := read(t, c, o); got.Cert == renewed.Cert {
		t.Errorf("certificate not reissued for a new host")
	}

	// The caBundle wiped (e.g. by a re-applied chart) is set again.
	var mwc admissionregistrationv1.MutatingWebhookConfiguration
	if err := c.Get(ctx, client.ObjectKey{Name: o.WebhookConfiguration}, &mwc); err != nil {
		t.Fatal(err)
	}
	mwc.Webhooks[0].ClientConfig.CABundle = nil
	if err := c.Update(ctx, &mwc); err != nil {
		t.Fatal(err)
	}
	if _, err := Ensure(ctx, c, o); err != nil {
		t.Fatal(err)
	}
	if got := read(t, c, o); got.CABundle != first.CA {
		t.Errorf("caBundle not restored")
	}
}

func TestEnsureNeedsWebhookConfiguration(t *testing.T) {
	c := fake.NewClientBuilder().Build()
	_, o, _ := setup(t)
	if _, err := Ensure(context.Background(), c, o); err == nil {
		t.Fatal("Ensure succeeded without a webhook configuration")
	}
}

// TestEnsureFillsTheChartsSecret: the chart creates the Secret Opaque and
// without data (so no render can wipe it); Ensure fills it and keeps its
// type, which the API server refuses to change.
func TestEnsureFillsTheChartsSecret(t *testing.T) {
	c, o, _ := setup(t)
	ctx := context.Background()
	empty := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: o.Namespace, Name: o.SecretName}, Type: corev1.SecretTypeOpaque}
	if err := c.Create(ctx, empty); err != nil {
		t.Fatal(err)
	}
	if _, err := Ensure(ctx, c, o); err != nil {
		t.Fatal(err)
	}
	var s corev1.Secret
	if err := c.Get(ctx, client.ObjectKeyFromObject(empty), &s); err != nil {
		t.Fatal(err)
	}
	if s.Type != corev1.SecretTypeOpaque {
		t.Errorf("type %q, want it kept Opaque", s.Type)
	}
	if st := read(t, c, o); st.CA == "" || st.Cert != st.File {
		t.Errorf("the Secret was not filled: %+v", st)
	}
}
