package main

import (
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/ebb-dev/ebb/test/repo"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// options says what to build and where to put it.
type options struct {
	repo      string        // push to <repo>/<name>; empty: write tarballs
	platforms []v1.Platform // one without a repo: a tarball holds one image
	tag       string
	root      string // the module root, where ko runs
	binDir    string // holds ko; images/ and ko-cache/ go in it
}

func parseOptions(args []string, getenv func(string) string) (options, error) {
	o := options{tag: "dev"}
	platforms := "linux/" + runtime.GOARCH // the machine's own, for its local cluster
	var problems []error
	fs := flag.NewFlagSet("images", flag.ContinueOnError)
	str := func(p *string, name, env, usage string) {
		if v := getenv(env); v != "" {
			*p = v
		}
		fs.StringVar(p, name, *p, usage+" (env "+env+")")
	}
	str(&o.repo, "repo", "KO_DOCKER_REPO", "push the base and the images to this repository, as <repo>/<name>:<tag>; empty: write <bin-dir>/images/<name>.tar")
	str(&platforms, "platforms", "PLATFORMS", "comma-separated platforms to build; several need --repo")
	str(&o.tag, "tag", "IMAGE_TAG", "the images' tag")
	str(&o.binDir, "bin-dir", "EBB_BIN_DIR", "where ko is, and where images/ and ko-cache/ go (default <module root>/bin)")
	if err := fs.Parse(args); err != nil {
		problems = append(problems, err)
	}
	if fs.NArg() > 0 {
		problems = append(problems, fmt.Errorf("unexpected arguments %q", fs.Args()))
	}

	for _, s := range strings.Split(platforms, ",") {
		p, err := v1.ParsePlatform(strings.TrimSpace(s))
		switch {
		case err != nil:
			problems = append(problems, fmt.Errorf("--platforms: %w", err))
		case p.OS != "linux" || p.Architecture == "":
			problems = append(problems, fmt.Errorf("--platforms: %q: want linux/<arch>, the base image is Linux's", s))
		default:
			o.platforms = append(o.platforms, *p)
		}
	}
	if o.repo == "" && len(o.platforms) > 1 {
		problems = append(problems, fmt.Errorf("--platforms %s: a tarball holds one image; set --repo (KO_DOCKER_REPO) to build several platforms", platforms))
	}
	if o.repo != "" {
		if _, err := name.NewRepository(o.repo); err != nil {
			problems = append(problems, fmt.Errorf("--repo: %w", err))
		}
	}
	if _, err := name.NewTag("ebb:" + o.tag); err != nil {
		problems = append(problems, fmt.Errorf("--tag %q: not a valid image tag", o.tag))
	}

	root, err := repo.Root()
	if err != nil {
		problems = append(problems, err)
	}
	o.root = root
	if o.binDir == "" {
		o.binDir = filepath.Join(root, "bin")
	}
	if o.binDir, err = filepath.Abs(o.binDir); err != nil {
		problems = append(problems, fmt.Errorf("--bin-dir: %w", err))
	}
	return o, errors.Join(problems...)
}
