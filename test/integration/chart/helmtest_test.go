package chart

import (
	"strings"
	"testing"

	"github.com/ebb-dev/ebb/check"
	"github.com/ebb-dev/ebb/internal/tlsfiles/tlstest"
)

// TestHelmTestHook: every object of `helm test` is a test hook (helm
// install leaves none behind), ebb-check takes the args the chart gives it,
// with or without TLS to the scaler, and its test app's namespace is opted
// in to this instance.
func TestHelmTestHook(t *testing.T) {
	for _, tls := range []bool{false, true} {
		r := release{name: "team1", namespace: "team1-ebb", sets: []string{"groupSuffix=team1.example.com"}}
		if tls {
			r.sets = append(r.sets, "scaler.tls.enabled=true")
		}
		objs := renderWithTests(t, r)
		hooks := 0
		for _, o := range objs {
			if o.GetAnnotations()["helm.sh/hook"] == "test" {
				hooks++
				if !strings.Contains(o.GetAnnotations()["helm.sh/hook-delete-policy"], "hook-succeeded") {
					t.Errorf("%s: a test hook left behind after it passes", id(o))
				}
			} else if strings.Contains(o.GetName(), "check") {
				t.Errorf("%s: part of helm test, but not a test hook", id(o))
			}
		}
		if hooks != 7 {
			t.Errorf("%d test hooks, want 7 (namespace, app, Service, ServiceAccount, Role, RoleBinding, check Pod)", hooks)
		}
		ns := find(t, objs, "Namespace", "team1-ebb-check-team1-example-com")
		if ns.GetLabels()["team1.example.com/inject"] != "enabled" {
			t.Errorf("the test app's namespace is not opted in: %v", ns.GetLabels())
		}
		pod := find(t, objs, "Pod", "team1-ebb-check")
		// The mounted client files, as the pod has them.
		f := tlstest.Issue(t, t.TempDir(), "team1-ebb-scaler.team1-ebb")
		mounted := map[string]string{"ca.crt": f.CA, "tls.crt": f.ClientCert, "tls.key": f.ClientKey}
		args := containerArgs(t, pod)
		var files []string
		for i, a := range args {
			if flag, file, ok := strings.Cut(a, "=/var/run/ebb/scaler-client/"); ok {
				files = append(files, file)
				args[i] = flag + "=" + mounted[file]
			}
		}
		if tls != (len(files) == 3) {
			t.Errorf("scaler.tls.enabled=%v, ebb-check gets the client files %q", tls, files)
		}
		o, err := check.ParseOptions(args, func(string) string { return "" })
		if err != nil {
			t.Errorf("ebb-check refuses the chart's args: %v", err)
		}
		if tls && o.ScalerCertFile == "" {
			t.Errorf("scaler.tls.enabled, and ebb-check has no client certificate: %q", args)
		}
		if o.ScalerAddress != "team1-ebb-scaler.team1-ebb:9090" || o.AppSelector != "team1.example.com/app=ebb-check-app" {
			t.Errorf("ebb-check asks scaler %q about pods %q", o.ScalerAddress, o.AppSelector)
		}
	}
}
