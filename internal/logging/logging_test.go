package logging

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func lines(t *testing.T, b *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not a JSON line: %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

func TestLevels(t *testing.T) {
	for _, tc := range []struct {
		level string
		want  []string // messages written, in order
	}{
		{LevelDebug, []string{"v1", "info", "error"}},
		{LevelInfo, []string{"info", "error"}},
		{LevelWarn, []string{"error"}},
		{LevelError, []string{"error"}},
	} {
		var b bytes.Buffer
		log := New(&b, "prog", Options{Level: tc.level, Format: FormatJSON})
		log.V(1).Info("v1")
		log.Info("info")
		log.Error(errors.New("boom"), "error")
		var got []string
		for _, l := range lines(t, &b) {
			got = append(got, l["msg"].(string))
			if l["logger"] != "prog" {
				t.Errorf("%s: logger %v, want prog", tc.level, l["logger"])
			}
			if l["msg"] == "v1" && l["level"] != "DEBUG" {
				t.Errorf("V(1) line has level %v, want DEBUG", l["level"])
			}
		}
		if strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("--log-level %s wrote %q, want %q", tc.level, got, tc.want)
		}
	}
}

func TestTextFormat(t *testing.T) {
	var b bytes.Buffer
	New(&b, "prog", Options{Level: LevelInfo, Format: FormatText}).Info("hello", "k", "v")
	if got := b.String(); !strings.Contains(got, "level=INFO msg=hello") || !strings.Contains(got, "k=v") {
		t.Errorf("text line %q", got)
	}
}

func TestValidateNamesTheFlags(t *testing.T) {
	err := Options{Level: "1", Format: "console"}.Validate()
	for _, want := range []string{`--log-level "1": want debug, info, warn or error`, `--log-format "console": want json or text`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v lacks %q", err, want)
		}
	}
	if err := DefaultOptions().Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
}
