package scaler

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/ebb-dev/ebb/internal/tlsfiles"
	"github.com/ebb-dev/ebb/internal/tlsfiles/tlstest"
)

// TestMutualTLS: with --tls-client-ca-file, gRPC (KEDA, the activators)
// needs a client certificate signed by that CA, and so does /apps on the
// admin port, which serves TLS too; /metrics and the probes need none.
func TestMutualTLS(t *testing.T) {
	f := tlstest.Issue(t, t.TempDir(), "ebb-scaler")
	r := newRig(t, nil, func(o *Options) {
		o.TLSCertFile, o.TLSKeyFile, o.TLSClientCAFile = f.ServerCert, f.ServerKey, f.CA
	})
	withCert, err := tlsfiles.Client(f.CA, f.ClientCert, f.ClientKey, f.ServerName)
	if err != nil {
		t.Fatal(err)
	}
	without, _ := tlsfiles.Client(f.CA, "", "", f.ServerName)
	for name, tc := range map[string]struct {
		client *tls.Config
		ok     bool
	}{
		"client certificate signed by the CA (KEDA's tlsClientCert)": {withCert, true},
		"no client certificate": {without, false},
	} {
		t.Run(name, func(t *testing.T) {
			conn, err := grpc.NewClient("passthrough:///scaler", grpc.WithTransportCredentials(credentials.NewTLS(tc.client)),
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

	admin := "https://" + r.s.AdminAddr().String()
	for _, tc := range []struct {
		client *tls.Config
		path   string
		code   int
	}{
		{without, "/healthz", 200},
		{without, "/metrics", 200},
		{without, "/apps", 401},
		{without, "/apps/shop/hello", 401},
		{withCert, "/apps", 200},
	} {
		hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tc.client}}
		resp, err := hc.Get(admin + tc.path)
		if err != nil {
			t.Errorf("GET %s: %v", tc.path, err)
			continue
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.code {
			t.Errorf("GET %s (client certificate %v) = %d, want %d", tc.path, tc.client == withCert, resp.StatusCode, tc.code)
		}
	}
	if resp, err := http.Get("http://" + r.s.AdminAddr().String() + "/apps"); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("plain HTTP to the admin port while TLS is on: %s", resp.Status)
		}
	}
}
