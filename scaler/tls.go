package scaler

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc/credentials"
)

// serverCredentials serves TLS with --tls-cert-file/--tls-key-file, reloaded
// when either file changes (cert-manager rotates them in place), and with
// --tls-client-ca-file requires client certificates signed by that CA: what
// KEDA's external scaler sends with its caCert / tlsClientCert / tlsClientKey
// trigger authentication, and what activators configure in their
// holdpush.Client dial options.
func serverCredentials(o Options) (credentials.TransportCredentials, error) {
	kp := &keyPair{certFile: o.TLSCertFile, keyFile: o.TLSKeyFile}
	if _, err := kp.get(nil); err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: kp.get}
	if o.TLSClientCAFile != "" {
		pem, err := os.ReadFile(o.TLSClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("--tls-client-ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-client-ca-file %s: no PEM certificate in it", o.TLSClientCAFile)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return credentials.NewTLS(cfg), nil
}

type keyPair struct {
	certFile, keyFile string

	mu      sync.Mutex
	certMod time.Time
	keyMod  time.Time
	cert    *tls.Certificate
}

func (k *keyPair) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	ci, err := os.Stat(k.certFile)
	if err != nil {
		return k.stale(fmt.Errorf("--tls-cert-file: %w", err))
	}
	ki, err := os.Stat(k.keyFile)
	if err != nil {
		return k.stale(fmt.Errorf("--tls-key-file: %w", err))
	}
	if k.cert != nil && ci.ModTime().Equal(k.certMod) && ki.ModTime().Equal(k.keyMod) {
		return k.cert, nil
	}
	c, err := tls.LoadX509KeyPair(k.certFile, k.keyFile)
	if err != nil {
		// Mid-rotation the two files may not match yet: keep serving the
		// previous pair.
		return k.stale(fmt.Errorf("load TLS key pair %s, %s: %w", k.certFile, k.keyFile, err))
	}
	k.cert, k.certMod, k.keyMod = &c, ci.ModTime(), ki.ModTime()
	return k.cert, nil
}

func (k *keyPair) stale(err error) (*tls.Certificate, error) {
	if k.cert != nil {
		return k.cert, nil
	}
	return nil, err
}
