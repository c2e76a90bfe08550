package suggest

import "testing"

func TestNearest(t *testing.T) {
	known := []string{"app", "hosts", "paths", "port", "cold-start-timeout", "activationConcurrency", "targetConcurrency"}
	for word, want := range map[string]string{
		"hsots":                "hosts", // two letters swapped
		"host":                 "hosts",
		"Hosts":                "hosts", // case
		"cold-start-timout":    "cold-start-timeout",
		"cold_start_timeout":   "cold-start-timeout",
		"activationConcurency": "activationConcurrency",
		"targetconcurrency":    "targetConcurrency",
		"ap":                   "app",
		"paht":                 "", // two edits from "paths": too far for a five-letter key
		"placeholder":          "",
		"x":                    "",
	} {
		if got := Nearest(word, known); got != want {
			t.Errorf("Nearest(%q) = %q, want %q", word, got, want)
		}
	}
}

func TestDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		d    int
	}{{"", "", 0}, {"a", "", 1}, {"ab", "ba", 1}, {"kitten", "sitting", 3}, {"hosts", "hsots", 1}} {
		if got := distance(tc.a, tc.b); got != tc.d {
			t.Errorf("distance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.d)
		}
	}
}
