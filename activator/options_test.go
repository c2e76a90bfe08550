package activator

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseOptionsFlagsEnvDefaults(t *testing.T) {
	env := map[string]string{"EBB_QUEUE_SIZE": "50", "EBB_COLD_START_TIMEOUT": "30s", "POD_NAME": "act-0", "POD_NAMESPACE": "ebb-system", "EBB_API_GROUP_SUFFIX": "team1.example.com"}
	o, err := ParseOptions([]string{"--queue-size=70", "--listen=:9000", "--scaler-addresses=10.0.0.1:9090, 10.0.0.2:9090"}, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	got := []any{o.QueueSize, o.ColdStartTimeout, o.HandoffPort, o.ScalerAddresses, o.PodName, o.GroupSuffix}
	want := []any{70, 30 * time.Second, 9000, []string{"10.0.0.1:9090", "10.0.0.2:9090"}, "act-0", "team1.example.com"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

func TestParseOptionsReportsEveryProblem(t *testing.T) {
	env := map[string]string{"EBB_PROBE_INTERVAL": "soon"}
	_, err := ParseOptions([]string{"--api-group-suffix=nodot", "--queue-size=0", "--cold-start-timeout=-1s", "--scaler-service=bad", "--log-format=xml"}, func(k string) string { return env[k] })
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"EBB_PROBE_INTERVAL", "--api-group-suffix", "--queue-size", "--cold-start-timeout", "--scaler-service", "--log-format"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %s: %v", want, err)
		}
	}
}
