package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const (
	// nonroot is the user and group the images run as; the chart's pods
	// run as it too, with runAsNonRoot.
	nonroot = 65532
	// certsFile is where Debian's ca-certificates package puts the bundle,
	// on the build machine and in the image.
	certsFile = "/etc/ssl/certs/ca-certificates.crt"
)

// epoch is every timestamp in the base image, so that its digest is the
// same on every run.
var epoch = time.Unix(0, 0).UTC()

// baseImage is what ko puts ebb's binaries on: an image for one platform,
// or an index with one image per platform (they share the one layer, which
// holds no binaries).
func baseImage(platforms []v1.Platform) (remote.Taggable, error) {
	certs, err := os.ReadFile(certsFile)
	if err != nil {
		return nil, fmt.Errorf("base image: CA certificates: %w (install Debian's ca-certificates package)", err)
	}
	layer, err := baseLayer(certs)
	if err != nil {
		return nil, fmt.Errorf("base image: %w", err)
	}
	if len(platforms) == 1 {
		return basePlatformImage(layer, platforms[0])
	}
	adds := make([]mutate.IndexAddendum, 0, len(platforms))
	for _, p := range platforms {
		img, err := basePlatformImage(layer, p)
		if err != nil {
			return nil, err
		}
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
	}
	return mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), adds...), nil
}

func basePlatformImage(layer v1.Layer, p v1.Platform) (v1.Image, error) {
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{
		Created:   v1.Time{Time: epoch},
		CreatedBy: "ebb test/images: passwd, group, nsswitch.conf, /tmp, /home/nonroot, CA certificates",
	}})
	if err != nil {
		return nil, fmt.Errorf("base image for %s: %w", p, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("base image for %s: %w", p, err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant, cf.OSVersion = p.OS, p.Architecture, p.Variant, p.OSVersion
	cf.Created = v1.Time{Time: epoch}
	cf.Config = v1.Config{
		User:       fmt.Sprintf("%d:%d", nonroot, nonroot),
		WorkingDir: "/home/nonroot",
		Env: []string{
			"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			"SSL_CERT_FILE=" + certsFile,
		},
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("base image for %s: %w", p, err)
	}
	return img, nil
}

// baseLayer is the base image's one layer. Directories are listed before
// what they hold, and nothing in it depends on when or by whom it is built.
func baseLayer(certs []byte) (v1.Layer, error) {
	const (
		passwd = "root:x:0:0:root:/root:/sbin/nologin\n" +
			"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
		group = "root:x:0:\n" +
			"nonroot:x:65532:\n"
		// Go's resolver reads hosts' order from here.
		nsswitch = "hosts: files dns\n"
	)
	entries := []struct {
		name string
		mode int64
		uid  int // and gid
		body []byte
	}{
		{name: "etc/", mode: 0o755},
		{name: "etc/passwd", mode: 0o644, body: []byte(passwd)},
		{name: "etc/group", mode: 0o644, body: []byte(group)},
		{name: "etc/nsswitch.conf", mode: 0o644, body: []byte(nsswitch)},
		{name: "etc/ssl/", mode: 0o755},
		{name: "etc/ssl/certs/", mode: 0o755},
		{name: certsFile[1:], mode: 0o644, body: certs},
		{name: "home/", mode: 0o755},
		{name: "home/nonroot/", mode: 0o755, uid: nonroot},
		{name: "root/", mode: 0o700},
		{name: "tmp/", mode: 0o1777},
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, Uid: e.uid, Gid: e.uid, ModTime: epoch, Typeflag: tar.TypeDir}
		if e.body != nil {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("layer: %s: %w", e.name, err)
		}
		if _, err := tw.Write(e.body); err != nil {
			return nil, fmt.Errorf("layer: %s: %w", e.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}, tarball.WithMediaType(types.OCILayer))
}
