package activator

import (
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/ebb-dev/ebb/internal/holdpush"
	"github.com/ebb-dev/ebb/internal/testwait"
	"github.com/ebb-dev/ebb/internal/tlsfiles"
	"github.com/ebb-dev/ebb/internal/tlsfiles/tlstest"
)

// TestPushesOverTLS: with --scaler-ca-file, --scaler-cert-file and
// --scaler-key-file the held counts reach a scaler that requires client
// certificates, verified under the scaler Service's DNS name; without the
// client certificate they do not.
func TestPushesOverTLS(t *testing.T) {
	f := tlstest.Issue(t, t.TempDir(), "ebb-scaler.ebb-system.svc")
	serverTLS, err := tlsfiles.Server(f.ServerCert, f.ServerKey, f.CA, tls.RequireAndVerifyClientCert)
	if err != nil {
		t.Fatal(err)
	}
	hold := holdpush.NewServer(holdpush.ServerOptions{})
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(serverTLS)))
	hold.Register(srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	env := map[string]string{"POD_NAME": "activator-0", "POD_NAMESPACE": "ebb-system"}
	parse := func(args ...string) Options {
		t.Helper()
		o, err := ParseOptions(append([]string{"--scaler-service=ebb-system/ebb-scaler:grpc"}, args...), func(k string) string { return env[k] })
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	for name, tc := range map[string]struct {
		opts   Options
		counts bool
	}{
		"client certificate":    {parse("--scaler-ca-file="+f.CA, "--scaler-cert-file="+f.ClientCert, "--scaler-key-file="+f.ClientKey), true},
		"no client certificate": {parse("--scaler-ca-file=" + f.CA), false},
	} {
		t.Run(name, func(t *testing.T) {
			if tc.opts.ScalerServerName != "ebb-scaler.ebb-system.svc" {
				t.Fatalf("scaler server name %q, want the Service's DNS name", tc.opts.ScalerServerName)
			}
			dial, err := scalerDialOptions(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			app := holdpush.App{Namespace: "shop", Name: strings.ReplaceAll(name, " ", "-")}
			c, err := holdpush.NewClient(holdpush.ClientOptions{Activator: "ebb-system/" + app.Name, DialOptions: dial, Log: testr.New(t)})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetAddresses([]string{lis.Addr().String()})
			c.Set(app, 3)
			if tc.counts {
				testwait.Check(t, 5*time.Second, func() error {
					if n := hold.Held(app); n != 3 {
						return fmt.Errorf("the scaler holds %d for %s, want 3", n, app)
					}
					return nil
				})
				return
			}
			time.Sleep(500 * time.Millisecond)
			if n := hold.Held(app); n != 0 {
				t.Errorf("a push without a client certificate was counted: %d", n)
			}
		})
	}
}

func TestScalerTLSOptions(t *testing.T) {
	env := map[string]string{"POD_NAME": "a", "POD_NAMESPACE": "ebb-system"}
	_, err := ParseOptions([]string{"--scaler-cert-file=x.pem", "--scaler-addresses=10.0.0.1:9090", "--scaler-ca-file=ca.pem"}, func(k string) string { return env[k] })
	for _, want := range []string{"--scaler-cert-file and --scaler-key-file: set both or neither", "--scaler-ca-file needs --scaler-server-name", "--scaler-ca-file: stat ca.pem"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
}
