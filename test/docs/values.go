package docs

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// ValuesTable is the chart values table of docs/configuration.md, made from
// charts/ebb/values.yaml: a row for every key, in the file's order, with its
// default and the text of its "# --" comment (helm-docs' convention), or
// the generic text of a key of that name. A map gets a row only when a
// comment describes it; a list or an empty map is a value.
func ValuesTable(values string) string {
	type row struct{ key, value, text string }
	var (
		rows  []row
		stack []struct {
			indent int
			key    string
		}
		text   []string
		inDesc bool
	)
	keyLine := regexp.MustCompile(`^( *)([A-Za-z_][A-Za-z0-9_]*):\s*(.*)$`)
	comment := regexp.MustCompile(`^ *# ?(.*)$`)
	for _, l := range strings.Split(values, "\n") {
		if strings.TrimSpace(l) == "" {
			text, inDesc = nil, false
			continue
		}
		if m := comment.FindStringSubmatch(l); m != nil {
			t := m[1]
			switch {
			case strings.HasPrefix(t, "-- "):
				text, inDesc = []string{t[3:]}, true
			case strings.HasPrefix(t, " "): // an indented example ends the text
				inDesc = false
			case inDesc || len(text) == 0 && t != "":
				text, inDesc = append(text, t), true
			}
			continue
		}
		m := keyLine.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		indent, key, value := len(m[1]), m[2], m[3]
		for len(stack) > 0 && stack[len(stack)-1].indent >= indent {
			stack = stack[:len(stack)-1]
		}
		var path []string
		for _, s := range stack {
			path = append(path, s.key)
		}
		path = append(path, key)
		desc := strings.Join(text, " ")
		text, inDesc = nil, false
		if value == "" {
			stack = append(stack, struct {
				indent int
				key    string
			}{indent, key})
			if desc != "" {
				rows = append(rows, row{strings.Join(path, "."), "", desc})
			}
			continue
		}
		rows = append(rows, row{strings.Join(path, "."), "`" + value + "`", desc})
	}
	var b strings.Builder
	b.WriteString("| key | default | what |\n|---|---|---|\n")
	for _, r := range rows {
		text := r.text
		if text == "" {
			text = genericText(r.key)
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", r.key, r.value, strings.ReplaceAll(rewrite(text), "|", `\|`))
	}
	return b.String()
}

// genericTexts describe keys of the same name in every component, by the
// end of their path.
var genericTexts = map[string]string{
	"nameOverride":                     "replaces the chart's name in the release's object names",
	"fullnameOverride":                 "replaces `<release>-<chart>` as the prefix of the release's object names",
	"image.repository":                 "image repository",
	"image.pullPolicy":                 "image pull policy",
	"image.tag":                        "image tag; defaults to the chart's appVersion",
	"resources.requests.cpu":           "CPU request",
	"resources.requests.memory":        "memory request",
	"resources.limits.memory":          "memory limit (no CPU limit by default)",
	"podDisruptionBudget.enabled":      "a PodDisruptionBudget for these pods",
	"podDisruptionBudget.minAvailable": "the PodDisruptionBudget's minAvailable (a budget that would block every node drain is refused)",
	"nodeSelector":                     "the pods' nodeSelector",
	"tolerations":                      "the pods' tolerations",
	"affinity":                         "the pods' affinity",
	"priorityClassName":                "the pods' priorityClassName",
	"podAnnotations":                   "extra annotations on the pods",
	"podLabels":                        "extra labels on the pods",
	"extraArgs":                        "more flags for the binary ([Flags](#flags))",
	"renewBefore":                      "renew the serving certificate this long before it expires",
	"serviceMonitor.interval":          "scrape interval",
	"serviceMonitor.labels":            "labels on the ServiceMonitor (for your Prometheus' selector)",
	"podMonitor.interval":              "scrape interval",
	"podMonitor.labels":                "labels on the PodMonitor (for your Prometheus' selector)",
	"dashboard.labels":                 "labels on the dashboard's ConfigMap (Grafana's sidecar selects by them)",
	"dashboard.annotations":            "annotations on the dashboard's ConfigMap",
	"activator.namespaceSelector":      "with `activator.routeSelector`: label selector on the namespace of the routes the default pool admits",
}

func genericText(key string) string {
	ends := make([]string, 0, len(genericTexts))
	for k := range genericTexts {
		ends = append(ends, k)
	}
	sort.Slice(ends, func(i, j int) bool { return len(ends[i]) > len(ends[j]) })
	for _, k := range ends {
		if key == k || strings.HasSuffix(key, "."+k) {
			return genericTexts[k]
		}
	}
	return ""
}

// rewrite turns the comments' references into links of docs/ and puts
// placeholders such as <suffix> in code, where markdown keeps them.
func rewrite(text string) string {
	if t, ok := strings.CutSuffix(text, ", e.g."); ok { // the example is in docs/pools.md
		text = t + " ([Activator pools](pools.md))"
	}
	for _, r := range [][2]string{
		{"(README, Performance)", "([Performance](performance.md))"},
		{`(README "Several clusters")`, "([Several clusters](several-clusters.md))"},
	} {
		text = strings.ReplaceAll(text, r[0], r[1])
	}
	parts := strings.Split(text, "`")
	placeholder := regexp.MustCompile("[^\\s`(]*<[^<>\\s]+>[^\\s`]*")
	for i := 0; i < len(parts); i += 2 {
		parts[i] = placeholder.ReplaceAllStringFunc(parts[i], func(w string) string {
			tail := ""
			for w != "" && strings.ContainsRune(".,;:)", rune(w[len(w)-1])) {
				tail, w = w[len(w)-1:]+tail, w[:len(w)-1]
			}
			return "`" + w + "`" + tail
		})
	}
	return strings.Join(parts, "`")
}
