package inject

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ebb-dev/ebb/internal/groupsuffix"
)

func TestUnknownKeys(t *testing.T) {
	n := groupsuffix.MustNew("team1.example.com")
	for name, tc := range map[string]struct {
		labels, annotations map[string]string
		want                []string
	}{
		"every key ebb reads": {
			labels: map[string]string{"team1.example.com/app": "a", "app.kubernetes.io/name": "a"},
			annotations: map[string]string{"team1.example.com/hosts": "", "team1.example.com/paths": "", "team1.example.com/port": "",
				"team1.example.com/service": "", "team1.example.com/queue-size": "", "team1.example.com/cold-start-timeout": "",
				"team1.example.com/drain-timeout": "", "team1.example.com/response-header-timeout": "", "team1.example.com/placeholder": "",
				"team1.example.com/request-timeout": "", "team1.example.com/stream-idle-timeout": "", "team1.example.com/concurrency": "",
				"team1.example.com/concurrency-queue": "", "team1.example.com/fallback": "",
				"team1.example.com/sidecar": "",
				"ebb.dev/hsots":             "another instance's keys are its own business"},
		},
		"typos": {
			labels:      map[string]string{"team1.example.com/ap": "a"},
			annotations: map[string]string{"team1.example.com/hsots": "", "team1.example.com/cold-start-timout": ""},
			want: []string{
				`label "team1.example.com/ap" is not a key ebb reads: did you mean "team1.example.com/app"?`,
				`annotation "team1.example.com/cold-start-timout" is not a key ebb reads: did you mean "team1.example.com/cold-start-timeout"?`,
				`annotation "team1.example.com/hsots" is not a key ebb reads: did you mean "team1.example.com/hosts"?`,
			},
		},
		"the wrong kind": {
			labels:      map[string]string{"team1.example.com/hosts": "a"},
			annotations: map[string]string{"team1.example.com/app": "a"},
			want: []string{
				`label "team1.example.com/hosts" is not a key ebb reads: set it as an annotation, not a label`,
				`annotation "team1.example.com/app" is not a key ebb reads: set it as a label, not an annotation`,
			},
		},
		"nothing near": {
			annotations: map[string]string{"team1.example.com/min-replicas": "1"},
			want: []string{`annotation "team1.example.com/min-replicas" is not a key ebb reads (annotations it reads: team1.example.com/hosts, team1.example.com/paths, ` +
				`team1.example.com/port, team1.example.com/service, team1.example.com/queue-size, team1.example.com/cold-start-timeout, ` +
				`team1.example.com/drain-timeout, team1.example.com/response-header-timeout, team1.example.com/request-timeout, team1.example.com/stream-idle-timeout, ` +
				`team1.example.com/concurrency, team1.example.com/concurrency-queue, team1.example.com/fallback, team1.example.com/placeholder, team1.example.com/route-labels, team1.example.com/sidecar)`},
		},
	} {
		t.Run(name, func(t *testing.T) {
			got := UnknownKeys(&metav1.ObjectMeta{Labels: tc.labels, Annotations: tc.annotations}, n)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
		})
	}
}
