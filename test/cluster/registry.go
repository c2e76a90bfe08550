package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// imageRegistry is the cluster's OCI registry: go-containerregistry's
// registry, served in this process on loopback for containerd to pull
// from. It serves the images `make images` wrote to bin/images, under the
// names a release publishes (ghcr.io/ebb-dev/<name>:<tag>) with the host
// left out: containerd's hosts.toml maps ghcr.io to it.
type imageRegistry struct {
	addr   string
	server *http.Server
	images []string // the references served
}

// startRegistry serves a registry on a free port of ip (loopback, or the
// host's end of a cluster namespace's veth) and pushes every
// image tarball in dir into it.
func startRegistry(ctx context.Context, dir, ip string) (*imageRegistry, error) {
	tars, err := filepath.Glob(filepath.Join(dir, "*.tar"))
	if err != nil || len(tars) == 0 {
		return nil, fmt.Errorf("no images in %s: run `make images` first", dir)
	}
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	r := &imageRegistry{
		addr:   l.Addr().String(),
		server: &http.Server{Handler: registry.New(registry.Logger(log.New(io.Discard, "", 0))), ReadHeaderTimeout: 10 * time.Second},
	}
	go func() { _ = r.server.Serve(l) }()
	for _, t := range tars {
		if err := r.load(ctx, t); err != nil {
			r.stop()
			return nil, err
		}
	}
	return r, nil
}

// load pushes each tagged image of a tarball to the registry under the
// same repository path.
func (r *imageRegistry) load(ctx context.Context, path string) error {
	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(path) })
	if err != nil {
		return fmt.Errorf("image tarball %s: %w", path, err)
	}
	var n int
	for _, d := range m {
		for _, t := range d.RepoTags {
			tag, err := name.NewTag(t)
			if err != nil {
				return fmt.Errorf("image tarball %s: tag %q: %w", path, t, err)
			}
			img, err := tarball.ImageFromPath(path, &tag)
			if err != nil {
				return fmt.Errorf("image %s: %w", t, err)
			}
			local, err := name.NewTag(r.addr+"/"+tag.RepositoryStr()+":"+tag.TagStr(), name.Insecure)
			if err != nil {
				return fmt.Errorf("image %s: %w", t, err)
			}
			if err := remote.Write(local, img, remote.WithContext(ctx)); err != nil {
				return fmt.Errorf("push %s to the local registry: %w", t, err)
			}
			r.images = append(r.images, t)
			n++
		}
	}
	if n == 0 {
		return fmt.Errorf("image tarball %s names no image", path)
	}
	return nil
}

func (r *imageRegistry) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := r.server.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		_ = r.server.Close()
	}
}

// String lists what the registry serves.
func (r *imageRegistry) String() string {
	return fmt.Sprintf("%s serving %s", r.addr, strings.Join(r.images, ", "))
}
