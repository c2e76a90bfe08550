package docs

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/ebb-dev/ebb/activator"
	"github.com/ebb-dev/ebb/check"
	"github.com/ebb-dev/ebb/federation"
	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/internal/options"
	"github.com/ebb-dev/ebb/scaler"
	"github.com/ebb-dev/ebb/sidecar"
	"github.com/ebb-dev/ebb/test/repo"
	"github.com/ebb-dev/ebb/webhook"
	"github.com/ebb-dev/ebb/webhook/inject"
)

var update = flag.Bool("update", false, "rewrite the flag lists and the chart values table of docs/configuration.md from the binaries' usage and charts/ebb/values.yaml")

// read returns a file of the repository, by its slash-separated path.
func read(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repo.MustRoot(t), filepath.FromSlash(name)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// section returns the text of the section of doc headed heading (a whole
// heading line, such as "## Metrics"), up to the next heading of the same
// or a higher level outside a fenced code block.
func section(t *testing.T, doc, heading string) string {
	t.Helper()
	_, after, ok := strings.Cut(doc, "\n"+heading+"\n")
	if !ok {
		t.Fatalf("no section %q", heading)
	}
	level := strings.Index(heading, " ")
	var b strings.Builder
	fenced := false
	for _, l := range strings.SplitAfter(after, "\n") {
		if strings.HasPrefix(l, "```") {
			fenced = !fenced
		}
		if h := strings.Index(l, " "); !fenced && h > 0 && h <= level && strings.Trim(l[:h], "#") == "" {
			break
		}
		b.WriteString(l)
	}
	return b.String()
}

// TestMetrics: the metrics table of docs/operations.md lists every ebb_
// metric the components export, and no other.
func TestMetrics(t *testing.T) {
	doc := section(t, read(t, "docs/operations.md"), "## Metrics")
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(ebb_[a-z_]+)` \\|").FindAllStringSubmatch(doc, -1) {
		documented[m[1]] = true
	}
	exported := ExportedMetrics(t)
	if len(exported) == 0 || len(documented) == 0 {
		t.Fatalf("found %d exported and %d documented metrics", len(exported), len(documented))
	}
	if missing := diff(exported, documented); len(missing) > 0 {
		t.Errorf("exported but not in the metrics table of docs/operations.md: %q", missing)
	}
	if stale := diff(documented, exported); len(stale) > 0 {
		t.Errorf("in the metrics table of docs/operations.md but exported by no component: %q", stale)
	}
}

// TestChartValues: the chart values table of docs/configuration.md is
// ValuesTable of charts/ebb/values.yaml (a row for every key, with its
// default and comment). With -update it rewrites the table:
//
//	go test ./test/docs -run TestChartValues -update
func TestChartValues(t *testing.T) {
	const name = "docs/configuration.md"
	values := read(t, "charts/ebb/values.yaml")
	var parsed map[string]any
	if err := yaml.Unmarshal([]byte(values), &parsed); err != nil {
		t.Fatal(err)
	}
	want := ValuesTable(values)
	// Every key yaml sees is a row: the line-based reading missed none.
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, v := range m {
			if sub, ok := v.(map[string]any); ok && len(sub) > 0 {
				walk(prefix+k+".", sub)
			} else if !strings.Contains(want, "\n| `"+prefix+k+"` |") {
				t.Errorf("ValuesTable has no row for %s", prefix+k)
			}
		}
	}
	walk("", parsed)

	doc := read(t, name)
	sec := section(t, doc, "## Chart values")
	start := strings.Index(sec, "| key | default | what |\n")
	if start < 0 {
		t.Fatalf("%s: no table under \"## Chart values\"", name)
	}
	end := start
	for _, l := range strings.SplitAfter(sec[start:], "\n") {
		if !strings.HasPrefix(l, "|") {
			break
		}
		end += len(l)
	}
	got := sec[start:end]
	if got == want {
		return
	}
	if !*update {
		t.Fatalf("%s: the chart values table is not charts/ebb/values.yaml's; run go test ./test/docs -run TestChartValues -update\n%s", name, lineDiff(got, want))
	}
	i := strings.Index(doc, sec)
	doc = doc[:i+start] + want + doc[i+end:]
	if err := os.WriteFile(filepath.Join(repo.MustRoot(t), name), []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
}

func usage[T any, P interface {
	*T
	options.Options
}](program string, defaults func() T) func(io.Writer) {
	return func(w io.Writer) { options.WriteUsage[T, P](w, program, defaults()) }
}

// binaries are ebb's programs and their usage, as each prints it for -h.
var binaries = []struct {
	name  string
	usage func(io.Writer)
}{
	{"ebb-webhook", usage("ebb-webhook", webhook.DefaultOptions)},
	{"ebb-activator", usage("ebb-activator", activator.DefaultOptions)},
	{"ebb-scaler", usage("ebb-scaler", scaler.DefaultOptions)},
	{"ebb-sidecar", usage("ebb-sidecar", sidecar.DefaultOptions)},
	{"ebb-federation", usage("ebb-federation", federation.DefaultOptions)},
	{"ebb-check", usage("ebb-check", check.DefaultOptions)},
}

// TestFlags: docs/configuration.md lists every flag of every binary as the
// binary's -h prints it, under "### ebb-<name>" in a text block. With
// -update it rewrites those blocks:
//
//	go test ./test/docs -run TestFlags -update
func TestFlags(t *testing.T) {
	const name = "docs/configuration.md"
	doc := read(t, name)
	out := doc
	for _, b := range binaries {
		var want bytes.Buffer
		b.usage(&want)
		heading := "\n### " + b.name + "\n"
		i := strings.Index(out, heading)
		if i < 0 {
			t.Errorf("%s has no section %q", name, strings.TrimSpace(heading))
			continue
		}
		start := strings.Index(out[i:], "\n```text\n")
		next := strings.Index(out[i+len(heading):], "\n#")
		if start < 0 || (next >= 0 && start > next+len(heading)) {
			t.Errorf("%s: no ```text block under %q", name, strings.TrimSpace(heading))
			continue
		}
		start += i + len("\n```text\n")
		end := strings.Index(out[start:], "```\n")
		if end < 0 {
			t.Fatalf("%s: the block under %q does not end", name, strings.TrimSpace(heading))
		}
		end += start
		if got := out[start:end]; got != want.String() {
			if !*update {
				t.Errorf("%s: the flags of %s are not what %s -h prints; run go test ./test/docs -run TestFlags -update\n%s",
					name, b.name, b.name, lineDiff(got, want.String()))
			}
			out = out[:start] + want.String() + out[end:]
		}
	}
	if *update && out != doc {
		if err := os.WriteFile(filepath.Join(repo.MustRoot(t), name), []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// lineDiff lists the lines only in got (-) and only in want (+).
func lineDiff(got, want string) string {
	g, w := map[string]bool{}, map[string]bool{}
	for _, l := range strings.Split(got, "\n") {
		g[l] = true
	}
	for _, l := range strings.Split(want, "\n") {
		w[l] = true
	}
	var b strings.Builder
	for _, l := range strings.Split(got, "\n") {
		if !w[l] {
			fmt.Fprintf(&b, "- %s\n", l)
		}
	}
	for _, l := range strings.Split(want, "\n") {
		if !g[l] {
			fmt.Fprintf(&b, "+ %s\n", l)
		}
	}
	return b.String()
}

// TestLinks: every relative link of the README, DEVELOPING.md and docs/
// names a file that exists and, with a #fragment, a heading of that file.
func TestLinks(t *testing.T) {
	root := repo.MustRoot(t)
	files := []string{"README.md", "DEVELOPING.md"}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) == 0 {
		t.Fatal("no docs/*.md")
	}
	for _, d := range docs {
		files = append(files, "docs/"+filepath.Base(d))
	}
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, f := range files {
		text := withoutCode(read(t, f), true)
		for _, m := range link.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, frag, _ := strings.Cut(target, "#")
			file := f
			if path != "" {
				file = filepath.ToSlash(filepath.Join(filepath.Dir(f), path))
				if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(file))); err != nil {
					t.Errorf("%s links to %s: %v", f, target, err)
					continue
				}
			}
			if frag == "" {
				continue
			}
			if !strings.HasSuffix(file, ".md") {
				t.Errorf("%s links to %s: a fragment of a file that is not markdown", f, target)
				continue
			}
			if !anchors(t, file)[frag] {
				t.Errorf("%s links to %s: %s has no heading #%s", f, target, file, frag)
			}
		}
	}
}

// withoutCode drops fenced code blocks and, with inline, inline code: text
// there that looks like a link or a heading is not one.
func withoutCode(s string, inline bool) string {
	var b strings.Builder
	fenced := false
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			if inline {
				l = regexp.MustCompile("`[^`]*`").ReplaceAllString(l, "``")
			}
			b.WriteString(l)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// anchors are the fragments GitHub gives the headings of a markdown file:
// lower case, punctuation but - and _ dropped, spaces as -, a repeated
// one suffixed -1, -2, ...
func anchors(t *testing.T, file string) map[string]bool {
	out := map[string]bool{}
	drop := regexp.MustCompile(`[^\p{L}\p{N} _-]`)
	for _, l := range strings.Split(withoutCode(read(t, file), false), "\n") {
		if !strings.HasPrefix(l, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(l, "#"))
		a := strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(h), ""), " ", "-")
		for n, base := 1, a; out[a]; n++ {
			a = fmt.Sprintf("%s-%d", base, n)
		}
		out[a] = true
	}
	return out
}

func diff(a, b map[string]bool) []string {
	var out []string
	for k := range a {
		if !b[k] {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// TestReadmeExampleHangsTogether: the README's complete example (which
// test/e2e's TestReadmeExample applies to a cluster) opts its namespace in,
// and its Deployment, Service and ScaledObject name each other as ebb
// needs: the app label is the trigger's app, the Service targets the
// container port by its name, the ScaledObject scales the Deployment with
// a fallback.
func TestReadmeExampleHangsTogether(t *testing.T) {
	readme := read(t, "README.md")
	example := section(t, readme, "## A complete example")
	const inject = "kubectl label namespace shop ebb.dev/inject=enabled\n"
	if !strings.Contains(example, inject) {
		t.Errorf("the README's complete example does not opt its namespace in (%q)", inject)
	}
	_, after, ok := strings.Cut(example, "```yaml\n")
	if !ok {
		t.Fatal("no YAML block in the README's complete example")
	}
	block, _, _ := strings.Cut(after, "```")
	objs := map[string]map[string]any{}
	for _, doc := range strings.Split(block, "\n---\n") {
		var o map[string]any
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatal(err)
		}
		kind, _ := o["kind"].(string)
		objs[kind] = o
	}
	get := func(kind string, path ...any) any {
		var v any = objs[kind]
		for _, p := range path {
			switch p := p.(type) {
			case string:
				m, _ := v.(map[string]any)
				v = m[p]
			case int:
				l, _ := v.([]any)
				if p >= len(l) {
					return nil
				}
				v = l[p]
			}
		}
		return v
	}
	app := get("Deployment", "spec", "template", "metadata", "labels", "ebb.dev/app")
	checks := []struct {
		what      string
		got, want any
	}{
		{"the Deployment's app label", app == nil, false},
		{"no hosts annotation (an Ingress's or HTTPRoute's hosts are the app's: the next section)", get("Deployment", "spec", "template", "metadata", "annotations", "ebb.dev/hosts") == nil, true},
		{"the Service's targetPort", get("Service", "spec", "ports", 0, "targetPort"), get("Deployment", "spec", "template", "spec", "containers", 0, "ports", 0, "name")},
		{"the Service's selector", get("Service", "spec", "selector", "app"), get("Deployment", "spec", "template", "metadata", "labels", "app")},
		{"the ScaledObject's target", get("ScaledObject", "spec", "scaleTargetRef", "name"), get("Deployment", "metadata", "name")},
		{"the ScaledObject's fallback", get("ScaledObject", "spec", "fallback") == nil, false},
		{"the trigger's type", get("ScaledObject", "spec", "triggers", 0, "type"), "external-push"},
		{"the trigger's app", get("ScaledObject", "spec", "triggers", 0, "metadata", "app"), app},
		{"the trigger's scaler", get("ScaledObject", "spec", "triggers", 0, "metadata", "scalerAddress"), "ebb-scaler.ebb-system:9090"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("the README's complete example: %s is %v, want %v", c.what, c.got, c.want)
		}
	}
	if _, ok := get("Service", "spec", "ports", 0, "targetPort").(string); !ok {
		t.Errorf("the README's Service targets its port by number: it must name it")
	}
}

// TestPodKeys: the "Labels and annotations" table of docs/configuration.md
// has a row for every label and annotation the webhook reads on a pod, and
// each key it lists as a pod's is one the webhook reads.
func TestPodKeys(t *testing.T) {
	names, err := groupsuffix.New("ebb.dev")
	if err != nil {
		t.Fatal(err)
	}
	doc := section(t, read(t, "docs/configuration.md"), "## Labels and annotations")
	documented := map[string]map[string]bool{"label": {}, "annotation": {}}
	for _, m := range regexp.MustCompile("(?m)^\\| `(ebb\\.dev/[a-z-]+)` \\| Pod (label|annotation)").FindAllStringSubmatch(doc, -1) {
		documented[m[2]][m[1]] = true
	}
	// The webhook lists the keys it reads when it meets one far from all.
	const far = "ebb.dev/qqqqqqqqqqqqqqqq"
	known := map[string]map[string]bool{"label": {}, "annotation": {}}
	warnings := inject.UnknownKeys(&metav1.ObjectMeta{Labels: map[string]string{far: ""}, Annotations: map[string]string{far: ""}}, names)
	for _, w := range warnings {
		m := regexp.MustCompile(`^(label|annotation) .*\((?:labels|annotations) it reads: (.*)\)$`).FindStringSubmatch(w)
		if m == nil {
			t.Fatalf("the webhook's warning for %s does not list the keys it reads: %s", far, w)
		}
		for _, k := range strings.Split(m[2], ", ") {
			known[m[1]][k] = true
		}
	}
	for _, kind := range []string{"label", "annotation"} {
		if len(known[kind]) == 0 || len(documented[kind]) == 0 {
			t.Fatalf("found %d %ss the webhook reads and %d documented", len(known[kind]), kind, len(documented[kind]))
		}
		if missing := diff(known[kind], documented[kind]); len(missing) > 0 {
			t.Errorf("the webhook reads pod %ss that docs/configuration.md's table lacks: %q", kind, missing)
		}
		if stale := diff(documented[kind], known[kind]); len(stale) > 0 {
			t.Errorf("docs/configuration.md's table lists pod %ss the webhook does not read: %q", kind, stale)
		}
	}
}

// TestValueNamesInText: a chart value named in the text of the README,
// DEVELOPING.md or docs/ (`activator.queueSize`, `--set
// certManager.enabled=false`) is a key of charts/ebb/values.yaml, so a
// renamed value leaves no old name behind.
func TestValueNamesInText(t *testing.T) {
	var values map[string]any
	if err := yaml.Unmarshal([]byte(read(t, "charts/ebb/values.yaml")), &values); err != nil {
		t.Fatal(err)
	}
	keys := map[string]bool{}
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, v := range m {
			keys[prefix+k] = true
			if sub, ok := v.(map[string]any); ok {
				walk(prefix+k+".", sub)
			}
		}
	}
	walk("", values)
	files := []string{"README.md", "DEVELOPING.md"}
	docs, err := filepath.Glob(filepath.Join(repo.MustRoot(t), "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range docs {
		files = append(files, "docs/"+filepath.Base(d))
	}
	name := regexp.MustCompile("`(?:--set )?([a-z][A-Za-z0-9]*(?:\\.[A-Za-z][A-Za-z0-9]*)+)(?:=[^`]*)?`")
	n := 0
	for _, f := range files {
		for _, m := range name.FindAllStringSubmatch(read(t, f), -1) {
			top, _, _ := strings.Cut(m[1], ".")
			if _, ok := values[top].(map[string]any); !ok {
				continue // not a chart value: a file, a host, a Go name
			}
			n++
			if !keys[m[1]] {
				t.Errorf("%s names the chart value %s, which values.yaml does not have", f, m[1])
			}
		}
	}
	if n == 0 {
		t.Fatal("found no chart value named in the docs")
	}
}

// TestFeatureTable: each row of the README's table of what ebb does names
// tests that exist, outside the benchmark programs, so no row is a claim
// without a test behind it.
func TestFeatureTable(t *testing.T) {
	table := section(t, read(t, "README.md"), "### What it does, and the test that shows it")
	tests := map[string]bool{}
	root := repo.MustRoot(t)
	decl := regexp.MustCompile(`(?m)^func (Test\w+)\(t \*testing\.T\)`)
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() && (rel == "bin" || strings.HasPrefix(d.Name(), ".") || rel == filepath.Join("test", "bench")) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range decl.FindAllStringSubmatch(string(b), -1) {
			tests[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	named := regexp.MustCompile("`(Test\\w+)`")
	rows := 0
	for _, l := range strings.Split(table, "\n") {
		if !strings.HasPrefix(l, "| ") || strings.HasPrefix(l, "| ebb |") {
			continue
		}
		rows++
		cells := strings.Split(strings.Trim(l, "| "), " | ")
		last := cells[len(cells)-1]
		names := named.FindAllStringSubmatch(last, -1)
		if len(names) == 0 {
			t.Errorf("row %q names no test", cells[0])
		}
		for _, n := range names {
			if !tests[n[1]] {
				t.Errorf("row %q: no test %s in the repository", cells[0], n[1])
			}
		}
	}
	if rows < 10 {
		t.Errorf("the table has %d rows; want the whole table (≥ 10)", rows)
	}
}
