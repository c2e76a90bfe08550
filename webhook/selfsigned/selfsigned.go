package selfsigned

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Secret keys.
const (
	KeyCACert = "ca.crt"
	KeyCAKey  = "ca.key"
)

// Lifetimes: a CA for ten years, a serving certificate for one, renewed once
// less than a third of its life is left.
const (
	CAValidity      = 10 * 365 * 24 * time.Hour
	ServingValidity = 365 * 24 * time.Hour
)

// Options say where the certificate lives and whom it names.
type Options struct {
	// Namespace and SecretName of the Secret (tls.crt, tls.key, ca.crt and
	// ca.key; created as kubernetes.io/tls, an existing one keeps its type).
	Namespace, SecretName string
	// CommonName of the CA, e.g. "ebb-webhook-ca.ebb.dev".
	CommonName string
	// Hosts are the DNS names and IP addresses of the serving certificate.
	Hosts []string
	// CertDir, CertName and KeyName are where the webhook server reads it.
	CertDir, CertName, KeyName string
	// WebhookConfiguration is the MutatingWebhookConfiguration whose webhooks
	// get the CA as caBundle.
	WebhookConfiguration string
	// ValidatingWebhookConfiguration, when set, is the
	// ValidatingWebhookConfiguration whose webhooks get it too: the same
	// server answers both.
	ValidatingWebhookConfiguration string
	// Now is the clock (tests); nil means time.Now.
	Now func() time.Time
}

// ServiceHosts are the cluster DNS names of Service svc in namespace ns.
func ServiceHosts(svc, ns string) []string {
	return []string{svc, svc + "." + ns, svc + "." + ns + ".svc", svc + "." + ns + ".svc.cluster.local"}
}

// Ensure makes sure the Secret holds a valid CA and a serving certificate
// for o.Hosts (creating or renewing them), writes the certificate to
// o.CertDir and sets the caBundle. It returns when the certificate expires.
// Replicas racing on the Secret converge: the loser of a write conflict
// reads the winner's certificate.
func Ensure(ctx context.Context, c client.Client, o Options) (time.Time, error) {
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	var bundle *bundle
	for attempt := 0; attempt < 3 && bundle == nil; attempt++ {
		var err error
		bundle, err = ensureSecret(ctx, c, o, now())
		if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
			continue
		}
		if err != nil {
			return time.Time{}, err
		}
	}
	if bundle == nil {
		return time.Time{}, fmt.Errorf("secret %s/%s: kept changing under us", o.Namespace, o.SecretName)
	}
	if err := writeFiles(o, bundle); err != nil {
		return time.Time{}, err
	}
	if err := patchCABundle(ctx, c, o.WebhookConfiguration, bundle.caPEM); err != nil {
		return time.Time{}, err
	}
	if o.ValidatingWebhookConfiguration != "" {
		if err := patchValidatingCABundle(ctx, c, o.ValidatingWebhookConfiguration, bundle.caPEM); err != nil {
			return time.Time{}, err
		}
	}
	return bundle.notAfter, nil
}

type bundle struct {
	caPEM, caKeyPEM, certPEM, keyPEM []byte
	notAfter                         time.Time
}

func ensureSecret(ctx context.Context, c client.Client, o Options, now time.Time) (*bundle, error) {
	var s corev1.Secret
	err := c.Get(ctx, types.NamespacedName{Namespace: o.Namespace, Name: o.SecretName}, &s)
	exists := err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("get secret %s/%s: %w", o.Namespace, o.SecretName, err)
	}
	b := &bundle{caPEM: s.Data[KeyCACert], caKeyPEM: s.Data[KeyCAKey], certPEM: s.Data[corev1.TLSCertKey], keyPEM: s.Data[corev1.TLSPrivateKeyKey]}
	ca, caKey, caErr := parseCA(b.caPEM, b.caKeyPEM)
	if caErr != nil || ca.NotAfter.Before(now.Add(ServingValidity)) {
		if ca, caKey, b.caPEM, b.caKeyPEM, err = newCA(o.CommonName, now); err != nil {
			return nil, err
		}
		b.certPEM = nil
	}
	if notAfter, ok := servingValid(b, ca, o.Hosts, now); ok {
		b.notAfter = notAfter
		return b, nil
	}
	if b.certPEM, b.keyPEM, b.notAfter, err = newServing(ca, caKey, o.Hosts, now); err != nil {
		return nil, err
	}
	if !exists {
		s.Namespace, s.Name, s.Type = o.Namespace, o.SecretName, corev1.SecretTypeTLS
	} // else keep its type, which is immutable: the chart creates it Opaque
	s.Data = map[string][]byte{KeyCACert: b.caPEM, KeyCAKey: b.caKeyPEM, corev1.TLSCertKey: b.certPEM, corev1.TLSPrivateKeyKey: b.keyPEM}
	if exists {
		err = c.Update(ctx, &s)
	} else {
		err = c.Create(ctx, &s)
	}
	if err != nil {
		return nil, fmt.Errorf("write secret %s/%s: %w", o.Namespace, o.SecretName, err)
	}
	return b, nil
}

func parseCA(certPEM, keyPEM []byte) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, nil, err
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, nil, errors.New("CA key is not ECDSA")
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, nil, err
	}
	if !cert.IsCA {
		return nil, nil, errors.New("not a CA certificate")
	}
	return cert, key, nil
}

// servingValid reports whether the serving certificate in b was signed by
// ca, names every host and has more than a third of its life left.
func servingValid(b *bundle, ca *x509.Certificate, hosts []string, now time.Time) (time.Time, bool) {
	if len(b.certPEM) == 0 {
		return time.Time{}, false
	}
	pair, err := tls.X509KeyPair(b.certPEM, b.keyPEM)
	if err != nil {
		return time.Time{}, false
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil || cert.CheckSignatureFrom(ca) != nil {
		return time.Time{}, false
	}
	for _, h := range hosts {
		if cert.VerifyHostname(h) != nil {
			return time.Time{}, false
		}
	}
	life := cert.NotAfter.Sub(cert.NotBefore)
	if cert.NotAfter.Sub(now) < life/3 {
		return time.Time{}, false
	}
	return cert.NotAfter, true
}

func serial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

func newCA(cn string, now time.Time) (*x509.Certificate, *ecdsa.PrivateKey, []byte, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("generate CA key: %w", err)
	}
	sn, err := serial()
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("CA serial: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(CAValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("sign CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("parse CA: %w", err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	return cert, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

func newServing(ca *x509.Certificate, caKey *ecdsa.PrivateKey, hosts []string, now time.Time) ([]byte, []byte, time.Time, error) {
	if len(hosts) == 0 {
		return nil, nil, time.Time{}, errors.New("serving certificate: no host to name")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, time.Time{}, fmt.Errorf("generate serving key: %w", err)
	}
	sn, err := serial()
	if err != nil {
		return nil, nil, time.Time{}, fmt.Errorf("serving serial: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: hosts[0]},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(ServingValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, time.Time{}, fmt.Errorf("sign serving certificate: %w", err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, tmpl.NotAfter, nil
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

// writeFiles writes the key and certificate atomically (rename), key first,
// only when they differ, so the server's file watcher reloads once.
func writeFiles(o Options, b *bundle) error {
	if err := os.MkdirAll(o.CertDir, 0o700); err != nil {
		return fmt.Errorf("create cert dir: %w", err)
	}
	for _, f := range []struct {
		name string
		data []byte
	}{{o.KeyName, b.keyPEM}, {o.CertName, b.certPEM}} {
		path := filepath.Join(o.CertDir, f.name)
		if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, f.data) {
			continue
		}
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, f.data, 0o600); err != nil {
			return fmt.Errorf("write %s: %w", tmp, err)
		}
		if err := os.Rename(tmp, path); err != nil {
			return fmt.Errorf("rename %s: %w", tmp, err)
		}
	}
	return nil
}

func patchCABundle(ctx context.Context, c client.Client, name string, caPEM []byte) error {
	var mwc admissionregistrationv1.MutatingWebhookConfiguration
	if err := c.Get(ctx, types.NamespacedName{Name: name}, &mwc); err != nil {
		return fmt.Errorf("get MutatingWebhookConfiguration %s (install it before the webhook starts): %w", name, err)
	}
	orig := mwc.DeepCopy()
	changed := false
	for i := range mwc.Webhooks {
		if !bytes.Equal(mwc.Webhooks[i].ClientConfig.CABundle, caPEM) {
			mwc.Webhooks[i].ClientConfig.CABundle = caPEM
			changed = true
		}
	}
	if !changed {
		return nil
	}
	if err := c.Patch(ctx, &mwc, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("set caBundle of MutatingWebhookConfiguration %s: %w", name, err)
	}
	return nil
}

func patchValidatingCABundle(ctx context.Context, c client.Client, name string, caPEM []byte) error {
	var vwc admissionregistrationv1.ValidatingWebhookConfiguration
	if err := c.Get(ctx, types.NamespacedName{Name: name}, &vwc); err != nil {
		return fmt.Errorf("get ValidatingWebhookConfiguration %s (install it before the webhook starts): %w", name, err)
	}
	orig := vwc.DeepCopy()
	changed := false
	for i := range vwc.Webhooks {
		if !bytes.Equal(vwc.Webhooks[i].ClientConfig.CABundle, caPEM) {
			vwc.Webhooks[i].ClientConfig.CABundle = caPEM
			changed = true
		}
	}
	if !changed {
		return nil
	}
	if err := c.Patch(ctx, &vwc, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("set caBundle of ValidatingWebhookConfiguration %s: %w", name, err)
	}
	return nil
}
