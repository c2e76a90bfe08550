package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ebb-dev/ebb/test/e2e/install"
)

// TestScalerTLS: a release with scaler.tls.enabled serves the scaler's gRPC
// and /apps to clients with its certificates only. The real KEDA operator
// reaches it through the chart's ClusterTriggerAuthentication (caCert,
// tlsClientCert, tlsClientKey), the activators push over TLS, and an app at
// zero cold-starts; a client without a certificate is refused.
func TestScalerTLS(t *testing.T) {
	ctx := t.Context()
	r := installSecond(t, "tls", "tls.example.com", "scaler.tls.enabled=true")
	a, err := r.DeployAtZero(ctx, lc, "e2e-shop-tls", "shop", scaling, t.Logf) // its ScaledObject Ready: KEDA reached the scaler
	if err != nil {
		t.Fatal(err)
	}
	results := install.Send(ctx, a.URL, a.Host, 10, 60*time.Second)
	if err := install.Failures(results); err != nil {
		t.Fatalf("of 10 requests at zero, not 200 (KEDA or the activator could not reach the scaler?):\n%v\n%s", err, r.Diagnose(ctx, lc, a.Namespace, a.Name))
	}
	t.Logf("cold start with KEDA and the activator on TLS to the scaler: 10 × 200")
	if out, err := r.Test(ctx, lc); err != nil {
		t.Errorf("helm test with scaler.tls.enabled: %v\n%s", err, out)
	}

	pods, err := lc.Client.CoreV1().Pods(r.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=ebb-scaler,app.kubernetes.io/instance=" + r.Name})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("scaler pods: %v (%d)", err, len(pods.Items))
	}
	ip := pods.Items[0].Status.PodIP
	secret, err := lc.Client.CoreV1().Secrets(r.Namespace).Get(ctx, r.Fullname+"-scaler-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(secret.Data["ca.crt"])
	anonymous := &tls.Config{RootCAs: roots, ServerName: r.Fullname + "-scaler." + r.Namespace + ".svc", MinVersion: tls.VersionTLS12}
	for name, creds := range map[string]credentials.TransportCredentials{
		"plaintext":                  insecure.NewCredentials(),
		"TLS, no client certificate": credentials.NewTLS(anonymous),
	} {
		conn, err := grpc.NewClient(ip+":9090", grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err = externalscaler.NewExternalScalerClient(conn).IsActive(cctx, &externalscaler.ScaledObjectRef{Namespace: a.Namespace, Name: a.Name,
			ScalerMetadata: map[string]string{"app": a.Name, "targetConcurrency": "1"}})
		cancel()
		conn.Close()
		if err == nil {
			t.Errorf("%s: the scaler answered IsActive", name)
		}
	}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: anonymous}}
	for path, want := range map[string]int{"/apps": http.StatusUnauthorized, "/readyz": http.StatusOK} {
		resp, err := hc.Get(fmt.Sprintf("https://%s:8080%s", ip, path))
		if err != nil {
			t.Errorf("GET %s: %v", path, err)
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s without a client certificate = %d %q, want %d", path, resp.StatusCode, strings.TrimSpace(string(body)), want)
		}
	}
}
