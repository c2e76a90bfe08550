package chart

import (
	"crypto/tls"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/ebb-dev/ebb/activator"
	"github.com/ebb-dev/ebb/internal/tlsfiles"
	"github.com/ebb-dev/ebb/internal/tlsfiles/tlstest"
	"github.com/ebb-dev/ebb/scaler"
)

// TestScalerTLSRender: with scaler.tls.enabled the chart's certificates
// work as the binaries use them. The scaler and the activators accept the
// chart's args with the files of the chart's Secrets; the scaler's
// certificate is valid for the address KEDA dials and the name the
// activators verify; both the activators' and KEDA's client certificates
// pass the scaler's mutual TLS; and the ClusterTriggerAuthentication maps
// KEDA's three parameters to KEDA's Secret.
func TestScalerTLSRender(t *testing.T) {
	r := release{name: "ebb", namespace: "ebb-system", sets: []string{"scaler.tls.enabled=true"}}
	objs := render(t, r)
	files := func(secret, ns string) string {
		t.Helper()
		s := find(t, objs, "Secret", secret)
		if s.GetNamespace() != ns {
			t.Errorf("Secret %s in namespace %q, want %q", secret, s.GetNamespace(), ns)
		}
		data, _, _ := unstructured.NestedStringMap(s.Object, "data")
		dir := t.TempDir()
		for _, k := range []string{"ca.crt", "tls.crt", "tls.key"} {
			b, err := base64.StdEncoding.DecodeString(data[k])
			if err != nil || len(b) == 0 {
				t.Fatalf("Secret %s key %s: %v", secret, k, err)
			}
			if err := os.WriteFile(filepath.Join(dir, k), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	serverDir, activatorDir, kedaDir := files("ebb-scaler-tls", "ebb-system"), files("ebb-activator-scaler-client", "ebb-system"), files("ebb-keda-scaler-client", "keda")

	// The binaries take the chart's args, the mounted paths pointed at the files.
	for _, tc := range []struct{ deployment, mount, dir string }{
		{"ebb-scaler", "/var/run/ebb/scaler-tls", serverDir},
		{"ebb-activator", "/var/run/ebb/scaler-client", activatorDir},
	} {
		d := find(t, objs, "Deployment", tc.deployment)
		var args []string
		for _, a := range containerArgs(t, d) {
			args = append(args, strings.ReplaceAll(a, tc.mount, tc.dir))
		}
		env := containerEnv(t, d)
		getenv := func(k string) string { return env[k] }
		var err error
		if tc.deployment == "ebb-scaler" {
			var o scaler.Options
			o, err = scaler.ParseOptions(args, getenv)
			if err == nil && (o.TLSCertFile == "" || o.TLSClientCAFile == "") {
				t.Errorf("the scaler's args turn no TLS on: %q", args)
			}
		} else {
			var o activator.Options
			o, err = activator.ParseOptions(args, getenv)
			if err == nil && (o.ScalerCAFile == "" || o.ScalerCertFile == "" || o.ScalerServerName != "ebb-scaler.ebb-system.svc") {
				t.Errorf("the activator's args: CA %q, cert %q, server name %q", o.ScalerCAFile, o.ScalerCertFile, o.ScalerServerName)
			}
		}
		if err != nil {
			t.Errorf("%s refuses the chart's TLS args: %v", tc.deployment, err)
		}
	}

	server, err := tlsfiles.Server(filepath.Join(serverDir, "tls.crt"), filepath.Join(serverDir, "tls.key"), filepath.Join(serverDir, "ca.crt"), tls.RequireAndVerifyClientCert)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ client, dir, serverName string }{
		{"activator", activatorDir, "ebb-scaler.ebb-system.svc"},
		{"KEDA", kedaDir, "ebb-scaler.ebb-system"}, // scalerAddress ebb-scaler.ebb-system:9090
	} {
		client, err := tlsfiles.Client(filepath.Join(tc.dir, "ca.crt"), filepath.Join(tc.dir, "tls.crt"), filepath.Join(tc.dir, "tls.key"), tc.serverName)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tlstest.Handshake(server, client); err != nil {
			t.Errorf("%s's certificate against the scaler's (%s): %v", tc.client, tc.serverName, err)
		}
	}

	cta := find(t, objs, "ClusterTriggerAuthentication", "ebb-scaler-tls.ebb.dev")
	refs, _, _ := unstructured.NestedSlice(cta.Object, "spec", "secretTargetRef")
	got := map[string]string{}
	for _, ref := range refs {
		m := ref.(map[string]any)
		got[m["parameter"].(string)] = m["name"].(string) + "/" + m["key"].(string)
	}
	for param, want := range map[string]string{"caCert": "ebb-keda-scaler-client/ca.crt", "tlsClientCert": "ebb-keda-scaler-client/tls.crt", "tlsClientKey": "ebb-keda-scaler-client/tls.key"} {
		if got[param] != want {
			t.Errorf("ClusterTriggerAuthentication %s = %q, want %q", param, got[param], want)
		}
	}
	for _, probe := range []string{"livenessProbe", "readinessProbe", "startupProbe"} {
		scheme, _, _ := unstructured.NestedString(containers(t, find(t, objs, "Deployment", "ebb-scaler"))[0], probe, "httpGet", "scheme")
		if scheme != "HTTPS" {
			t.Errorf("scaler %s scheme %q: its admin port serves TLS", probe, scheme)
		}
	}
}
