// Package tlsfiles builds TLS configurations from PEM files that are rotated
// in place (cert-manager, a Secret volume): a key pair is read again when
// either file changes, and the previous pair is kept while the two files do
// not match yet.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// KeyPair is a certificate and key read from files, current at every use.
type KeyPair struct {
	certFile, keyFile string

	mu      sync.Mutex
	certMod time.Time
	keyMod  time.Time
	cert    *tls.Certificate
}

// NewKeyPair reads the pair once, so a missing or bad file is an error at
// start rather than at the first handshake.
func NewKeyPair(certFile, keyFile string) (*KeyPair, error) {
	k := &KeyPair{certFile: certFile, keyFile: keyFile}
	if _, err := k.Certificate(); err != nil {
		return nil, err
	}
	return k, nil
}

// Certificate returns the pair as the files hold it now, or the last good
// one when they cannot be read or do not match (mid-rotation).
func (k *KeyPair) Certificate() (*tls.Certificate, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	ci, err := os.Stat(k.certFile)
	if err != nil {
		return k.stale(err)
	}
	ki, err := os.Stat(k.keyFile)
	if err != nil {
		return k.stale(err)
	}
	if k.cert != nil && ci.ModTime().Equal(k.certMod) && ki.ModTime().Equal(k.keyMod) {
		return k.cert, nil
	}
	c, err := tls.LoadX509KeyPair(k.certFile, k.keyFile)
	if err != nil {
		return k.stale(fmt.Errorf("load TLS key pair %s, %s: %w", k.certFile, k.keyFile, err))
	}
	k.cert, k.certMod, k.keyMod = &c, ci.ModTime(), ki.ModTime()
	return k.cert, nil
}

func (k *KeyPair) stale(err error) (*tls.Certificate, error) {
	if k.cert != nil {
		return k.cert, nil
	}
	return nil, err
}

// Pool reads the PEM certificates of caFile.
func Pool(caFile string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no PEM certificate in it", caFile)
	}
	return pool, nil
}

// Server is a server's configuration: the pair of certFile and keyFile and,
// with clientCAFile, client certificates signed by it verified (required or
// only when given, as clientAuth says).
func Server(certFile, keyFile, clientCAFile string, clientAuth tls.ClientAuthType) (*tls.Config, error) {
	kp, err := NewKeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return kp.Certificate() }}
	if clientCAFile != "" {
		if cfg.ClientCAs, err = Pool(clientCAFile); err != nil {
			return nil, err
		}
		cfg.ClientAuth = clientAuth
	}
	return cfg, nil
}

// Client is a client's configuration: servers verified against caFile under
// serverName, and, with certFile and keyFile, that pair presented.
func Client(caFile, certFile, keyFile, serverName string) (*tls.Config, error) {
	if caFile == "" || serverName == "" {
		return nil, errors.New("a TLS client needs a CA file and the server's name")
	}
	pool, err := Pool(caFile)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool, ServerName: serverName}
	if certFile != "" || keyFile != "" {
		kp, err := NewKeyPair(certFile, keyFile)
		if err != nil {
			return nil, err
		}
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return kp.Certificate() }
	}
	return cfg, nil
}
