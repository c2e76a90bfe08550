// Package tlstest issues a throwaway CA and certificates into files, for
// tests of TLS between ebb's components.
package tlstest

import (
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
)

// Files are the PEM files Issue wrote.
type Files struct {
	CA                    string // the CA's certificate
	ServerCert, ServerKey string // for ServerName, server auth
	ClientCert, ClientKey string // client auth
	ServerName            string
	dir                   string
	ca                    *x509.Certificate
	caKey                 *ecdsa.PrivateKey
	serial                int64
}

// Issue makes a CA and a server and a client certificate signed by it, in
// dir; the server certificate names serverName.
func Issue(t testing.TB, dir, serverName string) *Files {
	t.Helper()
	f := &Files{dir: dir, ServerName: serverName, serial: 1, caKey: newKey(t)}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(f.serial), Subject: pkix.Name{CommonName: "ebb test CA"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &f.caKey.PublicKey, f.caKey)
	if err != nil {
		t.Fatal(err)
	}
	if f.ca, err = x509.ParseCertificate(der); err != nil {
		t.Fatal(err)
	}
	f.CA = f.write(t, "ca.crt", "CERTIFICATE", der)
	f.ServerCert, f.ServerKey = f.Leaf(t, "server", serverName, x509.ExtKeyUsageServerAuth)
	f.ClientCert, f.ClientKey = f.Leaf(t, "client", "ebb-test-client", x509.ExtKeyUsageClientAuth)
	return f
}

// Leaf issues another certificate for name into <prefix>.crt and
// <prefix>.key (rewriting them: a rotation), and returns their paths.
func (f *Files) Leaf(t testing.TB, prefix, name string, usage x509.ExtKeyUsage) (certFile, keyFile string) {
	t.Helper()
	f.serial++
	k := newKey(t)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(f.serial), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{usage}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, f.ca, &k.PublicKey, f.caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return f.write(t, prefix+".crt", "CERTIFICATE", der), f.write(t, prefix+".key", "EC PRIVATE KEY", keyDER)
}

func (f *Files) write(t testing.TB, name, typ string, der []byte) string {
	t.Helper()
	p := filepath.Join(f.dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// Handshake completes one TLS handshake between server and client over
// loopback, the client reading a byte so that a certificate the server
// refuses fails it too, and returns the serial number of the server's
// certificate.
func Handshake(server, client *tls.Config) (string, error) {
	lis, err := tls.Listen("tcp", "127.0.0.1:0", server)
	if err != nil {
		return "", err
	}
	defer lis.Close()
	go func() {
		c, err := lis.Accept()
		if err == nil {
			_ = c.(*tls.Conn).Handshake()
			_, _ = c.Write([]byte("x"))
			c.Close()
		}
	}()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", lis.Addr().String(), client)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Read(make([]byte, 1)); err != nil {
		return "", err
	}
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
}
