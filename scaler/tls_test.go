package scaler

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

type certs struct {
	caPool                *x509.CertPool
	caFile                string
	serverCert, serverKey string
	client                tls.Certificate
}

func issue(t *testing.T, dir string) certs {
	t.Helper()
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	caKey := newKey()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ebb test CA"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	leaf := func(serial int64, usage x509.ExtKeyUsage) ([]byte, *ecdsa.PrivateKey) {
		k := newKey()
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "ebb-scaler"}, DNSNames: []string{"ebb-scaler"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{usage}, KeyUsage: x509.KeyUsageDigitalSignature}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return der, k
	}
	c := certs{caPool: x509.NewCertPool(), caFile: write("ca.pem", "CERTIFICATE", caDER)}
	c.caPool.AddCert(ca)
	sDER, sKey := leaf(2, x509.ExtKeyUsageServerAuth)
	sKeyDER, _ := x509.MarshalECPrivateKey(sKey)
	c.serverCert, c.serverKey = write("tls.crt", "CERTIFICATE", sDER), write("tls.key", "EC PRIVATE KEY", sKeyDER)
	cDER, cKey := leaf(3, x509.ExtKeyUsageClientAuth)
	c.client = tls.Certificate{Certificate: [][]byte{cDER}, PrivateKey: cKey}
	return c
}

func TestMutualTLS(t *testing.T) {
	c := issue(t, t.TempDir())
	r := newRig(t, nil, func(o *Options) {
		o.TLSCertFile, o.TLSKeyFile, o.TLSClientCAFile = c.serverCert, c.serverKey, c.caFile
	})
	for name, tc := range map[string]struct {
		clientCerts []tls.Certificate
		ok          bool
	}{
		"client certificate signed by the CA (KEDA's tlsClientCert)": {[]tls.Certificate{c.client}, true},
		"no client certificate": {nil, false},
	} {
		t.Run(name, func(t *testing.T) {
			creds := credentials.NewTLS(&tls.Config{RootCAs: c.caPool, Certificates: tc.clientCerts, ServerName: "ebb-scaler", MinVersion: tls.VersionTLS12})
			conn, err := grpc.NewClient("passthrough:///scaler", grpc.WithTransportCredentials(creds),
				grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return r.lis.DialContext(ctx) }))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err = externalscaler.NewExternalScalerClient(conn).IsActive(ctx, conc("hello"))
			if (err == nil) != tc.ok {
				t.Errorf("IsActive over TLS: %v, want success %v", err, tc.ok)
			}
		})
	}
}
