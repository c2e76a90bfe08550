# ebb — scale HTTP apps on Kubernetes to zero and back on real request counts.
# `make demo` and `make test` work on a fresh Debian machine with Go and root:
# every program they need is installed or built here, cached under bin/.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

ROOT := $(abspath .)
BIN  := $(ROOT)/bin
GO   ?= go
# The checksum database answers 404 for some k8s.io modules; go.sum pins them.
export GONOSUMDB := k8s.io
export KUBEBUILDER_ASSETS := $(BIN)/k8s
export EBB_BIN_DIR := $(BIN)

COMMANDS   := $(notdir $(wildcard cmd/*))
PROGRAMS   := $(addprefix $(BIN)/,$(COMMANDS)) $(BIN)/ebb-test-app
KUBE_BINS  := $(BIN)/kube-apiserver $(BIN)/kube-controller-manager $(BIN)/kube-proxy $(BIN)/kube-scheduler $(BIN)/kubelet
NODE_BINS  := $(BIN)/containerd $(BIN)/containerd-shim-runc-v2
KEDA_BINS  := $(BIN)/keda-operator $(BIN)/keda-adapter
# The Gateway API CRDs the local cluster applies with Traefik (copied from
# the module test/tools/traefik pins).
GATEWAY_API_CRDS := $(BIN)/gateway-api-crds
DEV_BINS   := $(BIN)/controller-gen $(BIN)/staticcheck $(BIN)/actionlint
IMAGE_BINS := $(BIN)/ko
# buf and the protoc-gen-go-grpc plugin from test/tools/proto; protoc-gen-go
# from ebb's own go.mod, so the generated code matches the runtime.
PROTO_BINS := $(BIN)/buf $(BIN)/protoc-gen-go $(BIN)/protoc-gen-go-grpc
# name:command, or name:path for packages that put nothing on PATH.
DEB_PKGS   := etcd-server:etcd nftables:nft wrk:wrk curl:curl iproute2:ip patch:patch nginx-light:nginx \
	runc:runc containernetworking-plugins:/usr/lib/cni/bridge ca-certificates:/etc/ssl/certs/ca-certificates.crt
TEST_FLAGS ?= -count=1 -timeout 80m
# Fuzz targets (package:Target) run for TEST_FUZZTIME each by `make test`
# and for FUZZTIME each by `make fuzz`; the differential ones compare the
# HTTP/1.1 engine's parsers, the sidecar's h2c path and the stats reader
# with net/http's.
FUZZ_TARGETS  := internal/http1:FuzzDifferentialRequest internal/http1:FuzzDifferentialResponse internal/http1:FuzzReadRequest sidecar:FuzzDifferentialH2C webhook/inject:FuzzInject internal/sidecarapi:FuzzParseSnapshot internal/sidecarapi:FuzzReadStatsResponse internal/staticanswer:FuzzMatch
TEST_FUZZTIME ?= 15s
FUZZTIME      ?= 5m
# Modules whose CRDs the chart tests apply (cert-manager, ServiceMonitor).
CRD_MODULES := github.com/cert-manager/cert-manager@v1.21.2 github.com/prometheus-operator/prometheus-operator@v0.85.0

##@ Everyday

.PHONY: help
help: ## List the targets.
	@awk 'BEGIN {FS = ":.*##"} /^##@/ {printf "\n%s\n", substr($$0, 5)} /^[a-zA-Z0-9_-]+:.*##/ {printf "  %-16s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: demo
demo: tools build images ## Bring up a local cluster, deploy a sample app at zero and show it wake and sleep.
	$(GO) run ./test/demo $(DEMO_ARGS)

.PHONY: test
test: tools build images ## Every test: unit, integration against a real API server, end to end; then each fuzz target briefly (what CI runs).
	$(GO) test $(TEST_FLAGS) $$($(GO) list ./... | grep -v '/test/e2e\(/multicluster\)\?$$')
	@# The end-to-end suites alone, one after the other: their timing
	@# bounds (crash → out of the hand-off slice, cold starts, headroom
	@# moves) must not share the 2 cores with the other packages' builds
	@# and API servers.
	$(GO) test -p 1 $(TEST_FLAGS) ./test/e2e/ ./test/e2e/multicluster/
	@$(MAKE) --no-print-directory bench-smoke
	@$(MAKE) --no-print-directory fuzz FUZZTIME=$(TEST_FUZZTIME)

.PHONY: test-unit
test-unit: ## The unit tests (go test -short): no cluster, no tools, about a minute.
	$(GO) test -short -count=1 ./...

.PHONY: test-integration
test-integration: tools build images ## The tests against a real API server or local cluster, without the end-to-end suite.
	$(GO) test $(TEST_FLAGS) $$($(GO) list ./... | grep -v '/test/e2e\(/multicluster\)\?$$')

.PHONY: e2e
e2e: tools build images ## The end-to-end suites: ebb installed from its chart on the local cluster (test/e2e), and on two clusters at once (test/e2e/multicluster).
	$(GO) test -p 1 $(TEST_FLAGS) ./test/e2e/ ./test/e2e/multicluster/

.PHONY: fuzz
fuzz: ## Run each fuzz target for FUZZTIME (default 5m); a failing input lands in the package's testdata/fuzz.
	@$(GO) run ./test/fuzz --go $(GO) --fuzztime $(FUZZTIME) $(FUZZ_TARGETS)

.PHONY: build
build: ## Build ebb's binaries and the test app into bin/.
	@mkdir -p $(BIN)
	@echo ">> building $(COMMANDS) ebb-test-app"
	$(GO) build -trimpath -ldflags='-s -w' -o $(BIN)/ $(addprefix ./cmd/,$(COMMANDS))
	$(GO) build -trimpath -ldflags='-s -w' -o $(BIN)/ebb-test-app ./test/app

# KO_DOCKER_REPO (none: tarballs), PLATFORMS (this machine's linux/<arch>) and IMAGE_TAG
# (dev) choose what is built and where; test/images/doc.go says more.
.PHONY: images
images: $(IMAGE_BINS) ## Build ebb's images with ko into bin/images/<name>.tar, or push them to KO_DOCKER_REPO.
	$(GO) run ./test/images

# The benchmark programs of make bench: all but the fleet's, which runs on
# the local cluster for about 55 minutes (make bench-fleet); its smoke mode
# (about a minute) is in make bench-smoke.
BENCH_DIRS = $(filter-out test/bench/fleet/,$(wildcard test/bench/*/))

.PHONY: bench
bench: tools build ## Run the benchmark programs (figures for docs/performance.md's table); each runs, those that failed are named at the end.
	@failed=""; for d in $(BENCH_DIRS); do echo ">> $$d"; $(GO) run ./$$d || failed="$$failed $$d"; done; \
	if [ -n "$$failed" ]; then echo "failed:$$failed"; exit 1; fi

.PHONY: bench-smoke
bench-smoke: tools build images ## Each benchmark program in its smoke mode (-smoke: tiny sizes, seconds), so that none stops working unseen; make test runs it.
	@for d in test/bench/*/; do echo ">> $$d -smoke"; s=$$SECONDS; $(GO) run ./$$d -smoke || { echo "<< $$d -smoke failed"; exit 1; }; echo "<< $$d -smoke passed in $$((SECONDS - s)) s"; done

.PHONY: bench-fleet
bench-fleet: tools build images ## The fleet bench on the local cluster: 10, 100 and 1,000 apps at zero, a table each (FLEET_ARGS, e.g. -n 10,100,1000,10000 or -idle 1m for a try; about 55 min).
	$(GO) run ./test/bench/fleet $(FLEET_ARGS)

.PHONY: lint
lint: $(DEV_BINS) ## gofmt, go vet, staticcheck and actionlint (the GitHub workflows).
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(BIN)/staticcheck ./...
	$(BIN)/actionlint .github/workflows/*.yaml

.PHONY: generate
generate: manifests $(PROTO_BINS) ## Generate everything generated: manifests, and holdpush's gRPC code from its .proto.
	cd internal/holdpush && PATH=$(BIN):$$PATH $(BIN)/buf generate

.PHONY: manifests
manifests: $(BIN)/controller-gen ## Generate CRDs, RBAC and webhook manifests into config/ from Go markers.
	$(BIN)/controller-gen object crd:crdVersions=v1 rbac:roleName=ebb-webhook webhook paths=./internal/apis/... paths=./webhook/... \
		output:crd:artifacts:config=config/crd output:rbac:artifacts:config=config/rbac output:webhook:artifacts:config=config/webhook

##@ Tools (cached in bin/)

.PHONY: tools
tools: debs $(KUBE_BINS) $(NODE_BINS) $(BIN)/coredns $(KEDA_BINS) $(BIN)/k8s/kube-apiserver $(BIN)/k8s/etcd $(DEV_BINS) $(PROTO_BINS) $(BIN)/helm $(BIN)/traefik $(GATEWAY_API_CRDS) ## Install Debian packages and build the control plane, KEDA, Traefik and dev tools.
	@$(GO) mod download
	@$(GO) mod download $(CRD_MODULES)

.PHONY: debs
debs: ## Install the Debian packages the local cluster and benchmarks use.
	@missing=""; for p in $(DEB_PKGS); do c=$${p#*:}; { [ -e "$$c" ] || command -v "$$c" >/dev/null; } || missing="$$missing $${p%%:*}"; done; \
	if [ -n "$$missing" ]; then \
		echo ">> apt-get install$$missing"; \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get install -y -q $$missing || { apt-get update -q && apt-get install -y -q $$missing; }; \
	fi

# The version is stamped as a release build does: the API server reports it
# (/version), and charts check it against their kubeVersion.
$(KUBE_BINS) &: test/tools/kube/go.mod test/tools/kube/go.sum
	@mkdir -p $(BIN)
	@echo ">> building kube-apiserver, kube-controller-manager, kube-proxy, kube-scheduler, kubelet (k8s.io/kubernetes; 10-15 min cold, seconds when cached)"
	cd test/tools/kube && $(GO) build -trimpath -ldflags="-s -w $$(cd $(ROOT)/test/tools/kube && $(GO) list -m -f '-X k8s.io/component-base/version.gitVersion={{.Version}}' k8s.io/kubernetes)" -o $(BIN)/ \
		k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-proxy \
		k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet
	@touch $(KUBE_BINS)

# containerd v2 from its module (Debian's 1.6 is end of life for the
# kubelet); runc and the CNI plugins are Debian's. The shim is static.
$(NODE_BINS) &: test/tools/containerd/go.mod test/tools/containerd/go.sum
	@mkdir -p $(BIN)
	@echo ">> building containerd and its runc shim (github.com/containerd/containerd/v2; ~2 min cold)"
	cd test/tools/containerd && $(GO) build -trimpath -tags 'no_btrfs no_devmapper no_zfs' -ldflags='-s -w' -o $(BIN)/ github.com/containerd/containerd/v2/cmd/containerd
	cd test/tools/containerd && CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o $(BIN)/ github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2
	@touch $(NODE_BINS)

$(BIN)/coredns: test/tools/coredns/go.mod test/tools/coredns/go.sum test/tools/coredns/main.go
	@mkdir -p $(BIN)
	@echo ">> building coredns (github.com/coredns/coredns; ~2 min cold)"
	cd test/tools/coredns && $(GO) build -trimpath -ldflags='-s -w' -o $@ .
	@touch $@

# The operator carries one fix: KEDA's module is copied from the module cache
# into bin/keda-src, the patch applied there, and the build pointed at it by a
# go.mod of its own (-modfile) with one more replace; nothing of KEDA is
# copied into this repository. The patch's header says what and why.
KEDA_PATCH := test/tools/keda/scale-loop-cache-closed.patch
KEDA_SRC   := $(BIN)/keda-src

$(KEDA_BINS) &: test/tools/keda/go.mod test/tools/keda/go.sum $(KEDA_PATCH) | debs
	@mkdir -p $(BIN)
	@echo ">> building the KEDA operator and metrics adapter (github.com/kedacore/keda/v2 plus $(KEDA_PATCH); ~10 min cold, seconds when cached)"
	cd test/tools/keda && $(GO) mod download github.com/kedacore/keda/v2
	rm -rf $(KEDA_SRC) && cp -r $$(cd test/tools/keda && $(GO) list -m -f '{{.Dir}}' github.com/kedacore/keda/v2) $(KEDA_SRC) && chmod -R u+w $(KEDA_SRC)
	patch -s -d $(KEDA_SRC) -p1 < $(KEDA_PATCH)
	cp test/tools/keda/go.mod $(BIN)/keda-build.mod && cp test/tools/keda/go.sum $(BIN)/keda-build.sum
	echo 'replace github.com/kedacore/keda/v2 => $(KEDA_SRC)' >> $(BIN)/keda-build.mod
	cd test/tools/keda && $(GO) build -modfile=$(BIN)/keda-build.mod -trimpath -ldflags='-s -w' -o $(BIN)/keda-operator github.com/kedacore/keda/v2/cmd/operator
	cd test/tools/keda && $(GO) build -modfile=$(BIN)/keda-build.mod -trimpath -ldflags='-s -w' -o $(BIN)/keda-adapter github.com/kedacore/keda/v2/cmd/adapter
	@touch $(KEDA_BINS)

# Traefik v3, the local cluster's ingress controller (its Kubernetes Ingress
# and Gateway API providers), is built inside its own module directory in the
# module cache: its go.mod replaces modules, which a build from a tools module
# would not apply. test/tools/traefik pins it and the Gateway API release it is
# built against, and its go.sum verifies both downloads. The version is stamped
# as Traefik's release builds do (traefik version, its start-up line).
$(BIN)/traefik: test/tools/traefik/go.mod test/tools/traefik/go.sum
	@mkdir -p $(BIN)
	@echo ">> building traefik (github.com/traefik/traefik/v3; ~4 min cold, 7 CPU-minutes)"
	cd test/tools/traefik && $(GO) mod download github.com/traefik/traefik/v3
	cd $$(cd test/tools/traefik && $(GO) list -m -f '{{.Dir}}' github.com/traefik/traefik/v3) && \
		$(GO) build -trimpath -ldflags="-s -w -X github.com/traefik/traefik/v3/pkg/version.Version=$$(cd $(ROOT)/test/tools/traefik && $(GO) list -m -f '{{.Version}}' github.com/traefik/traefik/v3)" \
		-o $@ ./cmd/traefik
	@touch $@

# The Gateway API's standard-channel CRDs (GatewayClass, Gateway, HTTPRoute,
# GRPCRoute, ReferenceGrant, BackendTLSPolicy), as their release ships them,
# for the local cluster to apply with Traefik.
$(GATEWAY_API_CRDS): test/tools/traefik/go.mod test/tools/traefik/go.sum
	cd test/tools/traefik && $(GO) mod download sigs.k8s.io/gateway-api
	rm -rf $@ && mkdir -p $@
	cp $$(cd test/tools/traefik && $(GO) list -m -f '{{.Dir}}' sigs.k8s.io/gateway-api)/config/crd/standard/*.yaml $@/
	chmod u+w $@/*.yaml && touch $@

$(BIN)/k8s/kube-apiserver: $(BIN)/kube-apiserver
	@mkdir -p $(BIN)/k8s && ln -sf ../kube-apiserver $@

$(BIN)/k8s/etcd: | debs
	@mkdir -p $(BIN)/k8s && ln -sf $$(command -v etcd) $@

$(PROTO_BINS) &: test/tools/proto/go.mod test/tools/proto/go.sum go.mod
	@mkdir -p $(BIN)
	@echo ">> building buf, protoc-gen-go and protoc-gen-go-grpc"
	cd test/tools/proto && GOBIN=$(BIN) $(GO) install github.com/bufbuild/buf/cmd/buf google.golang.org/grpc/cmd/protoc-gen-go-grpc
	GOBIN=$(BIN) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go
	@touch $(PROTO_BINS)

$(DEV_BINS) &: test/tools/dev/go.mod test/tools/dev/go.sum
	@mkdir -p $(BIN)
	cd test/tools/dev && GOBIN=$(BIN) $(GO) install honnef.co/go/tools/cmd/staticcheck sigs.k8s.io/controller-tools/cmd/controller-gen \
		github.com/rhysd/actionlint/cmd/actionlint
	@touch $(DEV_BINS)

$(IMAGE_BINS) &: test/tools/images/go.mod test/tools/images/go.sum
	@mkdir -p $(BIN)
	@echo ">> building ko (~2 min cold)"
	cd test/tools/images && GOBIN=$(BIN) $(GO) install github.com/google/ko
	@touch $(IMAGE_BINS)

$(BIN)/helm: test/tools/helm/go.mod test/tools/helm/go.sum
	@mkdir -p $(BIN)
	@echo ">> building helm (helm.sh/helm/v4; ~3 min cold)"
	cd test/tools/helm && GOBIN=$(BIN) $(GO) install helm.sh/helm/v4/cmd/helm
	@touch $@

.PHONY: clean
clean: ## Remove bin/ (the Go build cache keeps rebuilds quick).
	rm -rf $(BIN)
