package tlsfiles_test

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"testing"
	"time"

	"github.com/ebb-dev/ebb/internal/tlsfiles"
	"github.com/ebb-dev/ebb/internal/tlsfiles/tlstest"
)

func TestMutualTLS(t *testing.T) {
	f := tlstest.Issue(t, t.TempDir(), "ebb-scaler.ebb-system.svc")
	server, err := tlsfiles.Server(f.ServerCert, f.ServerKey, f.CA, tls.RequireAndVerifyClientCert)
	if err != nil {
		t.Fatal(err)
	}
	client, err := tlsfiles.Client(f.CA, f.ClientCert, f.ClientKey, f.ServerName)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tlstest.Handshake(server, client); err != nil {
		t.Fatalf("client with a certificate: %v", err)
	}
	anonymous, _ := tlsfiles.Client(f.CA, "", "", f.ServerName)
	if _, err := tlstest.Handshake(server, anonymous); err == nil {
		t.Error("a client without a certificate was served")
	}
	wrongName, _ := tlsfiles.Client(f.CA, f.ClientCert, f.ClientKey, "someone-else")
	if _, err := tlstest.Handshake(server, wrongName); err == nil {
		t.Error("a client trusted a certificate for another name")
	}
	stranger := tlstest.Issue(t, t.TempDir(), "ebb-scaler.ebb-system.svc")
	strangerClient, _ := tlsfiles.Client(f.CA, stranger.ClientCert, stranger.ClientKey, f.ServerName)
	if _, err := tlstest.Handshake(server, strangerClient); err == nil {
		t.Error("a client certificate from another CA was accepted")
	}
}

// TestRotation: a pair rewritten in place is served from the next
// handshake; a cert and key that do not match yet keep the previous pair.
func TestRotation(t *testing.T) {
	f := tlstest.Issue(t, t.TempDir(), "ebb-scaler")
	server, err := tlsfiles.Server(f.ServerCert, f.ServerKey, "", tls.NoClientCert)
	if err != nil {
		t.Fatal(err)
	}
	client, _ := tlsfiles.Client(f.CA, "", "", f.ServerName)
	first, err := tlstest.Handshake(server, client)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond) // a modification time the filesystem tells apart
	key, _ := os.ReadFile(f.ServerKey)
	f.Leaf(t, "server", f.ServerName, x509.ExtKeyUsageServerAuth)
	newKey, _ := os.ReadFile(f.ServerKey)
	if err := os.WriteFile(f.ServerKey, key, 0o600); err != nil { // mid-rotation: new cert, old key
		t.Fatal(err)
	}
	if got, err := tlstest.Handshake(server, client); err != nil || got != first {
		t.Errorf("mid-rotation: serial %s (%v), want the previous pair's %s", got, err, first)
	}
	if err := os.WriteFile(f.ServerKey, newKey, 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := tlstest.Handshake(server, client); err != nil || got == first {
		t.Errorf("after rotation: serial %s (%v), want a new one", got, err)
	}
}

func TestErrorsAtStart(t *testing.T) {
	f := tlstest.Issue(t, t.TempDir(), "x")
	for name, err := range map[string]error{
		"missing cert": func() error { _, err := tlsfiles.Server("/nonexistent", f.ServerKey, "", tls.NoClientCert); return err }(),
		"key of another cert": func() error {
			_, err := tlsfiles.Server(f.ServerCert, f.ClientKey, "", tls.NoClientCert)
			return err
		}(),
		"CA not PEM": func() error {
			_, err := tlsfiles.Server(f.ServerCert, f.ServerKey, f.ServerKey, tls.RequireAndVerifyClientCert)
			return err
		}(),
		"client without CA": func() error { _, err := tlsfiles.Client("", "", "", "x"); return err }(),
	} {
		if err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
