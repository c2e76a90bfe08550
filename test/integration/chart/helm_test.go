package chart

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/ebb-dev/ebb/test/repo"
)

// release is one helm release of the chart: its name, namespace and --set
// values.
type release struct {
	name, namespace string
	sets            []string
}

func (r release) args() []string {
	args := []string{r.name, chartDir(nil), "--namespace", r.namespace}
	for _, s := range r.sets {
		args = append(args, "--set", s)
	}
	return args
}

// chartDir is <module root>/charts/ebb.
func chartDir(t testing.TB) string {
	root, err := repo.Root()
	if err != nil {
		if t == nil {
			panic(err)
		}
		t.Fatal(err)
	}
	return filepath.Join(root, "charts", "ebb")
}

// helmPath is bin/helm, built by `make tools`.
func helmPath(t testing.TB) string {
	t.Helper()
	return repo.Tool(t, "helm")
}

// helm runs the helm binary with a private home, so no user configuration
// or repository cache takes part, and returns stdout and stderr.
func helm(t testing.TB, args ...string) (string, string, error) {
	t.Helper()
	home := t.TempDir()
	cmd := exec.Command(helmPath(t), args...)
	cmd.Env = append(os.Environ(),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), stderr.String(), err
}

// templateText renders r with `helm template`: what `helm install` creates
// (no test hooks).
func templateText(t testing.TB, r release) string {
	t.Helper()
	out, _, err := helm(t, append([]string{"template", "--skip-tests"}, r.args()...)...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// render renders r and decodes every object `helm install` creates.
func render(t testing.TB, r release) []*unstructured.Unstructured {
	t.Helper()
	return decodeText(t, r, templateText(t, r))
}

// renderWithTests renders r with the objects of `helm test` too.
func renderWithTests(t testing.TB, r release) []*unstructured.Unstructured {
	t.Helper()
	out, _, err := helm(t, append([]string{"template"}, r.args()...)...)
	if err != nil {
		t.Fatal(err)
	}
	return decodeText(t, r, out)
}

func decodeText(t testing.TB, r release, text string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := decode(text)
	if err != nil {
		t.Fatalf("decode the rendering of %s: %v", r.name, err)
	}
	return objs
}

func decode(text string) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(text), 4096)
	var out []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, err
		}
		if len(m) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		if u.GetKind() == "" || u.GetAPIVersion() == "" {
			return nil, fmt.Errorf("object without kind or apiVersion: %v", m)
		}
		out = append(out, u)
	}
}

func find(t testing.TB, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	t.Fatalf("no %s %q in %s", kind, name, ids(objs))
	return nil
}

func ofKind(objs []*unstructured.Unstructured, kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// ids are "Kind namespace/name" of objs, sorted.
func ids(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objs {
		out = append(out, id(o))
	}
	sort.Strings(out)
	return out
}

func id(o *unstructured.Unstructured) string {
	if o.GetNamespace() == "" {
		return o.GetKind() + " " + o.GetName()
	}
	return o.GetKind() + " " + o.GetNamespace() + "/" + o.GetName()
}
