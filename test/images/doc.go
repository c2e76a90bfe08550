// Command images is what `make images` runs: it builds ebb's OCI images
// (ebb-webhook, ebb-activator, ebb-scaler, ebb-sidecar, ebb-check, ebb-test-app and
// ebb-pause) with ko, without a Docker engine. It makes their base image
// itself: one layer with passwd and group (root, and nonroot 65532 whom the
// images run as), /tmp, /home/nonroot and the build machine's CA
// certificates, with fixed timestamps so that its digest is the same on
// every run. ko's shared build settings are in the repository's .ko.yaml.
//
// With no repository set (the default, what the tests use) each image is
// written to <bin>/images/<name>.tar, a docker-save tarball holding one
// image tagged ghcr.io/ebb-dev/<name>:<tag>; ko reads the base from a
// registry served in this process for the build only. With a repository
// set, the base and the images are pushed there as <repo>/ebb-base:<tag>
// and <repo>/<name>:<tag>, for every platform asked for.
//
// Options (flag, then env, then default): --repo/KO_DOCKER_REPO (none),
// --platforms/PLATFORMS (linux/<this machine's arch>; several need a repository),
// --tag/IMAGE_TAG (dev), --bin-dir/EBB_BIN_DIR (<module root>/bin: where
// ko is, and where images/ and ko's cache, ko-cache/, go).
package main
