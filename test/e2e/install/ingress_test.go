package install

import "testing"

func TestSampleValue(t *testing.T) {
	const name = "ebb_activator_requests_total"
	for _, c := range []struct {
		line   string
		labels []string
		want   float64
		ok     bool
	}{
		{`ebb_activator_requests_total{ebb_instance="ebb.dev",outcome="proxied",pool="default"} 94`, []string{`outcome="proxied"`}, 94, true},
		{`ebb_activator_requests_total{ebb_instance="ebb.dev",outcome="released",pool="default"} 581`, []string{`outcome="proxied"`}, 0, false},
		{`ebb_activator_requests_total{outcome="proxied"} 3`, []string{`outcome="proxied"`}, 3, true},
		{`ebb_activator_requests_total_x{outcome="proxied"} 3`, []string{`outcome="proxied"`}, 0, false},
		{`# TYPE ebb_activator_requests_total counter`, nil, 0, false},
		{`ebb_activator_requests_total{a="1",b="2"} 7`, []string{`a="1"`, `b="2"`}, 7, true},
		{`ebb_activator_requests_total{a="1",b="2"} 7`, []string{`a="1"`, `b="3"`}, 0, false},
	} {
		got, ok := sampleValue(c.line, name, c.labels)
		if got != c.want || ok != c.ok {
			t.Errorf("sampleValue(%q, %v) = %v, %v; want %v, %v", c.line, c.labels, got, ok, c.want, c.ok)
		}
	}
}
