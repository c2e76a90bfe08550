package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"golang.org/x/sync/errgroup"
)

// releaseRepo is where releases publish ebb's images; the tarballs are
// tagged as if from there, and the local cluster serves them under those
// names.
const releaseRepo = "ghcr.io/ebb-dev"

// image is one of ebb's images: its name and the main package in it.
type image struct{ name, pkg string }

var images = []image{
	{"ebb-webhook", "./cmd/ebb-webhook"},
	{"ebb-activator", "./cmd/ebb-activator"},
	{"ebb-scaler", "./cmd/ebb-scaler"},
	{"ebb-sidecar", "./cmd/ebb-sidecar"},
	{"ebb-check", "./cmd/ebb-check"},
	{"ebb-federation", "./cmd/ebb-federation"},
	{"ebb-test-app", "./test/app"},
	{"ebb-pause", "./test/pause"},
}

// budgets caps images' compressed size, in bytes: the sidecar is pulled
// onto every node that runs an app, before the app's pod can start.
var budgets = map[string]int64{"ebb-sidecar": 15e6}

// built is an image ko made: where it went, and its compressed size (the
// layers' and the config's) for each platform.
type built struct {
	image
	ref   string
	sizes []platformSize
}

type platformSize struct {
	platform string
	bytes    int64
}

func run(ctx context.Context, opts options, out io.Writer) error {
	start := time.Now()
	ko := filepath.Join(opts.binDir, "ko")
	if _, err := os.Stat(ko); err != nil {
		return fmt.Errorf("no ko at %s: `make images` builds it", ko)
	}
	base, err := baseImage(opts.platforms)
	if err != nil {
		return err
	}
	baseRepo := opts.repo
	if opts.repo == "" {
		addr, stop, err := serveRegistry()
		if err != nil {
			return err
		}
		defer stop()
		baseRepo = addr
	}
	baseRef, err := push(ctx, base, baseRepo+"/ebb-base:"+opts.tag)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, ">> ko build %d images for %s on %s\n", len(images), platformList(opts.platforms), baseRef)

	b := builder{opts: opts, koPath: ko, base: baseRef}
	results := make([]built, len(images))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(runtime.NumCPU())
	for i, img := range images {
		g.Go(func() error {
			r, err := b.build(gctx, img)
			results[i] = r
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	report(out, results)
	fmt.Fprintf(out, "%d images in %s\n", len(results), time.Since(start).Round(100*time.Millisecond))
	return overBudget(results)
}

// serveRegistry serves go-containerregistry's registry, in memory, on a
// free loopback port, for ko to read the base image from.
func serveRegistry() (addr string, stop func(), err error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("transient registry: %w", err)
	}
	srv := &http.Server{
		Handler:           registry.New(registry.Logger(log.New(io.Discard, "", 0))),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() { _ = srv.Serve(l) }()
	return l.Addr().String(), func() { srv.Close() }, nil
}

// push pushes an image or index to ref, a tag, and returns it by digest.
func push(ctx context.Context, t remote.Taggable, ref string) (string, error) {
	tag, err := name.NewTag(ref)
	if err != nil {
		return "", fmt.Errorf("push %s: %w", ref, err)
	}
	if err := remote.Push(tag, t, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return "", fmt.Errorf("push %s: %w", ref, err)
	}
	d, err := partial.Digest(t)
	if err != nil {
		return "", fmt.Errorf("push %s: %w", ref, err)
	}
	return tag.Context().Digest(d.String()).String(), nil
}

// builder runs ko, once per image. The runs share KOCACHE: the binaries'
// entries are per package, and a race on the base image's entry is one ko
// survives (it fetches the base again).
type builder struct {
	opts   options
	koPath string
	base   string // the base image by digest
}

// build runs `ko build` for img: it pushes the image to <repo>/<name>, or,
// with no repo, writes it to <bin>/images/<name>.tar, checked to hold that
// one image under its release name.
func (b builder) build(ctx context.Context, img image) (built, error) {
	args := []string{"build", "--bare", "--tags=" + b.opts.tag, "--platform=" + platformList(b.opts.platforms),
		"--image-label=org.opencontainers.image.source=https://github.com/ebb-dev/ebb",
		"--image-label=org.opencontainers.image.version=" + b.opts.tag}
	if b.opts.repo != "" {
		out, err := b.ko(ctx, b.opts.repo+"/"+img.name, append(args, "--sbom=spdx", img.pkg))
		if err != nil {
			return built{}, fmt.Errorf("%s: %w", img.name, err)
		}
		r := built{image: img, ref: strings.TrimSpace(out)}
		if r.sizes, err = pushedSizes(ctx, r.ref); err != nil {
			return built{}, fmt.Errorf("%s: inspect %s, which ko pushed: %w", img.name, r.ref, err)
		}
		return r, nil
	}

	// ko writes the tarball in a deferred Close whose error it drops, so
	// it goes to a temporary file, checked before it replaces the last one.
	file := filepath.Join(b.opts.binDir, "images", img.name+".tar")
	tmp := file + ".tmp"
	defer os.Remove(tmp)
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return built{}, fmt.Errorf("%s: %w", img.name, err)
	}
	args = append(args, "--push=false", "--tarball="+tmp, "--sbom=none", img.pkg)
	if _, err := b.ko(ctx, releaseRepo+"/"+img.name, args); err != nil {
		return built{}, fmt.Errorf("%s: %w", img.name, err)
	}
	r := built{image: img, ref: releaseRepo + "/" + img.name + ":" + b.opts.tag}
	s, err := tarballSize(tmp, r.ref)
	if err != nil {
		return built{}, fmt.Errorf("%s: ko's tarball: %w", img.name, err)
	}
	r.sizes = []platformSize{s}
	if err := os.Rename(tmp, file); err != nil {
		return built{}, fmt.Errorf("%s: %w", img.name, err)
	}
	return r, nil
}

// ko runs ko with KO_DOCKER_REPO=repo, in the module root, on the base
// image, and returns what it printed: the references of what it built.
func (b builder) ko(ctx context.Context, repo string, args []string) (string, error) {
	cmd := exec.CommandContext(ctx, b.koPath, args...)
	cmd.Dir = b.opts.root
	cmd.Env = append(os.Environ(),
		"KO_DOCKER_REPO="+repo,
		"KO_DEFAULTBASEIMAGE="+b.base,
		"KOCACHE="+filepath.Join(b.opts.binDir, "ko-cache"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("KO_DOCKER_REPO=%s ko %s: %w\n%s", repo, strings.Join(args, " "), err, stderr.Bytes())
	}
	return stdout.String(), nil
}

// tarballSize checks that the tarball at path holds one image, tagged
// want, and measures it.
func tarballSize(path, want string) (platformSize, error) {
	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(path) })
	if err != nil {
		return platformSize{}, err
	}
	if len(m) != 1 || !slices.Equal(m[0].RepoTags, []string{want}) {
		var tags [][]string
		for _, d := range m {
			tags = append(tags, d.RepoTags)
		}
		return platformSize{}, fmt.Errorf("holds images tagged %q; want one tagged %s", tags, want)
	}
	img, err := tarball.ImageFromPath(path, nil)
	if err != nil {
		return platformSize{}, err
	}
	return measure(img)
}

// pushedSizes measures each platform's image of the image or index at ref.
func pushedSizes(ctx context.Context, ref string) ([]platformSize, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return nil, err
	}
	desc, err := remote.Get(r, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain))
	if err != nil {
		return nil, err
	}
	if !desc.MediaType.IsIndex() {
		img, err := desc.Image()
		if err != nil {
			return nil, err
		}
		s, err := measure(img)
		return []platformSize{s}, err
	}
	idx, err := desc.ImageIndex()
	if err != nil {
		return nil, err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	var sizes []platformSize
	for _, d := range im.Manifests {
		img, err := idx.Image(d.Digest)
		if err != nil {
			return nil, err
		}
		s, err := measure(img)
		if err != nil {
			return nil, err
		}
		sizes = append(sizes, s)
	}
	return sizes, nil
}

// measure sums the compressed sizes of an image's layers and config.
func measure(img v1.Image) (platformSize, error) {
	m, err := img.Manifest()
	if err != nil {
		return platformSize{}, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return platformSize{}, err
	}
	s := platformSize{platform: cf.Platform().String(), bytes: m.Config.Size}
	for _, l := range m.Layers {
		s.bytes += l.Size
	}
	return s, nil
}

func report(out io.Writer, results []built) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	for _, r := range results {
		var sizes []string
		for _, s := range r.sizes {
			sizes = append(sizes, fmt.Sprintf("%s %s", megabytes(s.bytes), s.platform))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", r.name, r.ref, strings.Join(sizes, ", "))
	}
	tw.Flush()
}

// overBudget names every image larger than its budget.
func overBudget(results []built) error {
	var problems []error
	for _, r := range results {
		limit, ok := budgets[r.name]
		if !ok {
			continue
		}
		for _, s := range r.sizes {
			if s.bytes > limit {
				problems = append(problems, fmt.Errorf("%s (%s) is %s compressed, over its budget of %s", r.name, s.platform, megabytes(s.bytes), megabytes(limit)))
			}
		}
	}
	return errors.Join(problems...)
}

func megabytes(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/1e6) }

func platformList(ps []v1.Platform) string {
	var s []string
	for _, p := range ps {
		s = append(s, p.String())
	}
	return strings.Join(s, ",")
}
