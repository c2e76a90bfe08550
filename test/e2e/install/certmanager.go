package install

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/ebb-dev/ebb/test/cluster"
)

// Certificates is cert-manager's Certificate resource.
var Certificates = schema.GroupVersionResource{Group: "cert-manager.io", Version: "v1", Resource: "certificates"}

// CertManager stands in for cert-manager's controllers, which cannot be
// built from the Go module proxy (its cmd/controller module is not served
// there): for the Certificates the chart creates, it writes the Secrets
// cert-manager's CA issuer would write (type kubernetes.io/tls with
// tls.crt, tls.key and ca.crt, and cert-manager's annotations), and it does
// what cainjector does for a webhook configuration annotated
// cert-manager.io/inject-ca-from. The Certificate objects, their CRDs and
// ebb's side (the Deployment mounting the Secret, the webhook serving and
// reloading it) are the real ones.
type CertManager struct {
	c      *cluster.Cluster
	dyn    dynamic.Interface
	caKey  *ecdsa.PrivateKey
	caCert *x509.Certificate
	caPEM  []byte
}

// NewCertManager makes the CA its Secrets are signed by (the chart's own
// CA Certificate, issued by its self-signed Issuer, in cert-manager).
func NewCertManager(c *cluster.Cluster) (*CertManager, error) {
	dyn, err := dynamic.NewForConfig(c.RestConfig)
	if err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "ebb-webhook-ca (test cert-manager)"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	return &CertManager{c: c, dyn: dyn, caKey: key, caCert: cert, caPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

// Issue waits for the Certificate ns/name and writes its Secret with a new
// key and certificate for its dnsNames, as cert-manager does on issuance
// and renewal; it returns the certificate's serial number.
func (m *CertManager) Issue(ctx context.Context, ns, name string) (*big.Int, error) {
	var crt *unstructured.Unstructured
	if err := cluster.WaitFor(ctx, time.Minute, "Certificate "+ns+"/"+name, func(ctx context.Context) (bool, error) {
		var err error
		crt, err = m.dyn.Resource(Certificates).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	}); err != nil {
		return nil, err
	}
	secretName, _, _ := unstructured.NestedString(crt.Object, "spec", "secretName")
	dnsNames, _, _ := unstructured.NestedStringSlice(crt.Object, "spec", "dnsNames")
	issuer, _, _ := unstructured.NestedStringMap(crt.Object, "spec", "issuerRef")
	if secretName == "" || len(dnsNames) == 0 {
		return nil, fmt.Errorf("certificate %s/%s: no secretName or dnsNames", ns, name)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("key: %w", err)
	}
	sn := serial()
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: sn, Subject: pkix.Name{}, DNSNames: dnsNames,
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(90 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, m.caCert, &key.PublicKey, m.caKey)
	if err != nil {
		return nil, fmt.Errorf("certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("key: %w", err)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: secretName, Namespace: ns,
			Labels: map[string]string{"controller.cert-manager.io/fao": "true"},
			Annotations: map[string]string{
				"cert-manager.io/certificate-name": name,
				"cert-manager.io/alt-names":        strings.Join(dnsNames, ","),
				"cert-manager.io/common-name":      "",
				"cert-manager.io/ip-sans":          "",
				"cert-manager.io/uri-sans":         "",
				"cert-manager.io/issuer-name":      issuer["name"],
				"cert-manager.io/issuer-kind":      issuer["kind"],
				"cert-manager.io/issuer-group":     issuer["group"],
			},
		},
		Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{
			corev1.TLSCertKey:       pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
			corev1.TLSPrivateKeyKey: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
			"ca.crt":                m.caPEM,
		},
	}
	secrets := m.c.Client.CoreV1().Secrets(ns)
	if _, err := secrets.Create(ctx, secret, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		_, err = secrets.Update(ctx, secret, metav1.UpdateOptions{})
		if err != nil {
			return nil, fmt.Errorf("update Secret %s/%s: %w", ns, secretName, err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("create Secret %s/%s: %w", ns, secretName, err)
	}
	return sn, nil
}

// InjectCA does what cainjector does for the MutatingWebhookConfiguration
// name: it reads its cert-manager.io/inject-ca-from annotation
// (<namespace>/<Certificate>), and sets every webhook's caBundle to the
// ca.crt of that Certificate's Secret.
func (m *CertManager) InjectCA(ctx context.Context, name string) error {
	return cluster.WaitFor(ctx, time.Minute, "caBundle injected into "+name, func(ctx context.Context) (bool, error) {
		mwcs := m.c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations()
		mwc, err := mwcs.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		} else if err != nil {
			return false, err
		}
		from := mwc.Annotations["cert-manager.io/inject-ca-from"]
		ns, crtName, ok := strings.Cut(from, "/")
		if !ok {
			return false, fmt.Errorf("%s: annotation cert-manager.io/inject-ca-from is %q, want <namespace>/<certificate>", name, from)
		}
		crt, err := m.dyn.Resource(Certificates).Namespace(ns).Get(ctx, crtName, metav1.GetOptions{})
		if err != nil {
			return false, fmt.Errorf("read certificate %s named by %s: %w", from, name, err)
		}
		secretName, _, _ := unstructured.NestedString(crt.Object, "spec", "secretName")
		s, err := m.c.Client.CoreV1().Secrets(ns).Get(ctx, secretName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		} else if err != nil {
			return false, err
		}
		for i := range mwc.Webhooks {
			mwc.Webhooks[i].ClientConfig.CABundle = s.Data["ca.crt"]
		}
		_, err = mwcs.Update(ctx, mwc, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			return false, nil
		}
		return err == nil, err
	})
}
