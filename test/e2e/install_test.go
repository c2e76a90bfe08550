package e2e

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestChartInstall: every Deployment of the chart runs as real pods, all
// ready, and the webhook (self-signed TLS mode) has put its own CA into
// its MutatingWebhookConfiguration.
func TestChartInstall(t *testing.T) {
	ctx := t.Context()
	deploys, err := lc.Client.AppsV1().Deployments(ebb.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ready := map[string]int32{}
	for _, d := range deploys.Items {
		ready[d.Name] = d.Status.ReadyReplicas
	}
	want := map[string]int32{"ebb-webhook": 2, "ebb-activator": 2, "ebb-activator-a": 1, "ebb-activator-b": 1, "ebb-scaler": 2}
	if diff := cmp.Diff(want, ready); diff != "" {
		t.Errorf("ready replicas of the chart's Deployments (-want +got):\n%s", diff)
	}
	mwc, err := lc.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "sidecar-injector."+ebb.Names.Suffix(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range mwc.Webhooks {
		if len(w.ClientConfig.CABundle) == 0 {
			t.Errorf("webhook %s has no caBundle", w.Name)
		}
	}
}
