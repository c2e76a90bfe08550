package holdpush

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/ebb-dev/ebb/test/repo"
)

// TestGeneratedCodeIsFresh regenerates holdpushpb from its .proto into a
// temporary directory with the pinned buf and plugins and fails when the
// committed files differ (run `make generate`).
func TestGeneratedCodeIsFresh(t *testing.T) {
	buf := repo.Tool(t, "buf")
	repo.Tool(t, "protoc-gen-go")
	repo.Tool(t, "protoc-gen-go-grpc")
	tmp := t.TempDir()
	cmd := exec.Command(buf, "generate", "--output", tmp)
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(buf)+string(filepath.ListSeparator)+os.Getenv("PATH"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("buf generate: %v\n%s", err, out)
	}
	for _, f := range []string{"holdpush.pb.go", "holdpush_grpc.pb.go"} {
		want, err := os.ReadFile(filepath.Join(tmp, "holdpushpb", f))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join("holdpushpb", f))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("holdpushpb/%s is not what holdpushpb/holdpush.proto generates: run `make generate`", f)
		}
	}
}
