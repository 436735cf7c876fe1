# slurm-llm — build, test, install.
#
#   make build          static binaries into ./bin (CGO_ENABLED=0; version stamped from git)
#   make test           fast tests: no root, no Slurm, no nginx
#   make e2e            real local Slurm cluster (slurmdbd too) + real nginx (root; starts the cluster)
#   make e2e-real       the real llama.cpp lane (LLAMA_BIN, TINY_MODEL or LLAMA_MODEL; skipped without)
#   make e2e-slurm24    the e2e suite against Debian 13's Slurm 24.11 (a chroot; root, mmdebstrap)
#   make check          what CI runs: test packages (installs them as root), gofmt, vet, test,
#                       shipped configs, e2e
#   make bench          benchmarks, figures printed (root for the real-Slurm/nginx ones)
#   make bench-real     a busy tier (direct, nginx, front door) and a conversation's turns on 3 replicas, real llama-server (LLAMA_BIN, TINY_MODEL; skipped without)
#   make demo           the whole thing end to end on this machine (root)
#   make install        PREFIX=/usr/local DESTDIR=  binaries, configs, units, scripts
#   make package        .rpm and .deb of slurm-llm-node and slurm-llm-controller into ./dist (nfpm)

PREFIX     ?= /usr/local
DESTDIR    ?=
SYSCONFDIR ?= /etc/slurm-llm
UNITDIR    ?= /etc/systemd/system
VERSION    ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
GO         ?= go
BINDIR     ?= bin
# Static: no ELF interpreter, no glibc symbol. A cgo build on Debian 12 needs
# GLIBC_2.32/2.34, and Rocky 8 has 2.28; without cgo, user and group look-ups
# that Go's pure resolver cannot answer (LDAP, SSSD) go through getent(1).
export CGO_ENABLED = 0
LDFLAGS    := -s -w -X main.version=$(VERSION)
BINARIES   := llm-supervisor llm-upstreams fake-llama
E2E_TIMEOUT ?= 60m

.PHONY: all deps build test e2e e2e-real bench-real e2e-slurm24 check check-shipped vet fmt-check bench fuzz demo install package cluster-up cluster-down clean

all: build

build:
	@mkdir -p $(BINDIR)
	@for b in $(BINARIES); do \
		if [ -d cmd/$$b ]; then $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BINDIR)/$$b ./cmd/$$b || exit 1; fi; \
	done

vet:
	$(GO) vet ./...
	$(GO) vet -tags e2e ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

test:
	$(GO) test -count=1 ./...

# The e2e suite runs on the cluster with real per-node addresses (netns mode)
# by default; CLUSTER_MODE=loopback runs it where namespaces cannot be made.
CLUSTER_MODE ?= netns

cluster-up:
	scripts/slurm-cluster.sh up --$(CLUSTER_MODE)

cluster-down:
	scripts/slurm-cluster.sh down

e2e: cluster-up
	$(GO) test -tags e2e -p 1 -count=1 -timeout $(E2E_TIMEOUT) ./...

# The real llama.cpp lane (README): the distributed and elastic tiers' e2e
# with llama.cpp's own llama-server and ggml-rpc-server on the namespace
# cluster. LLAMA_BIN names the build's bin directory, LLAMA_MODEL or
# TINY_MODEL a model every node reads; without LLAMA_BIN it says so and
# skips (the tests skip too when a file is missing).
e2e-real:
	@if [ -z "$(LLAMA_BIN)" ]; then \
		echo "e2e-real: skipped: LLAMA_BIN is not set (the bin directory of a llama.cpp build with llama-server and ggml-rpc-server; the model in TINY_MODEL or LLAMA_MODEL)"; \
	else \
		$(MAKE) --no-print-directory cluster-up CLUSTER_MODE=netns && \
		$(GO) test -tags e2e -count=1 -p 1 -timeout $(E2E_TIMEOUT) -run 'TestE2ERealLlama|TestRealLlamaApply' -v ./cmd/llm-supervisor ./cmd/llm-upstreams ./endpoints/front; \
	fi

# The Slurm 24.11 lane (README): Debian 13's slurm-wlm and munge in a root made once with
# mmdebstrap (scripts/slurm24-root.sh, cached in SLURM24_ROOT), the netns cluster's daemons run
# from it (SLURM_ROOT), the client commands too (wrappers first on PATH), and the e2e suite
# (SLURM24_PKGS, SLURM24_RUN) on it; the cluster is brought down at the end, whatever the result.
# Hold /tmp/slurm-llm-cluster.lock around it, as around `make e2e`; a cluster that is up is
# brought down first. Not part of `make check` (CI keeps Debian 12's 22.05).
SLURM24_ROOT ?= /var/cache/slurm-llm/slurm24-root
SLURM24_BIN  ?= /tmp/slurm-llm-slurm24-bin
SLURM24_PKGS ?= ./...
SLURM24_RUN  ?= .
e2e-slurm24:
	@if [ "$$(id -u)" != 0 ]; then \
		echo "e2e-slurm24: skipped: needs root (chroot, bind mounts, the cluster)"; \
	elif ! SLURM24_ROOT=$(SLURM24_ROOT) scripts/slurm24-root.sh check && ! command -v mmdebstrap >/dev/null; then \
		echo "e2e-slurm24: skipped: no Slurm 24.11 root in $(SLURM24_ROOT) and no mmdebstrap to make one (apt-get install -y mmdebstrap)"; \
	else \
		start=$$(date +%s); \
		SLURM24_ROOT=$(SLURM24_ROOT) scripts/slurm24-root.sh build >/dev/null && \
		SLURM24_ROOT=$(SLURM24_ROOT) scripts/slurm24-root.sh wrappers $(SLURM24_BIN) || exit 1; \
		scripts/slurm-cluster.sh down >/dev/null; \
		SLURM_ROOT=$(SLURM24_ROOT) SLURM_ROOT_BINDS="$(CURDIR) /etc/slurm-llm" scripts/slurm-cluster.sh up --netns && \
		PATH="$(SLURM24_BIN):$$PATH" SLURM_CLIENT_PATH="$(SLURM24_BIN)" $(GO) test -tags e2e -p 1 -count=1 -timeout $(E2E_TIMEOUT) -run '$(SLURM24_RUN)' $(SLURM24_PKGS); \
		rc=$$?; \
		scripts/slurm-cluster.sh down; \
		echo "e2e-slurm24: exit $$rc after $$(( $$(date +%s) - start )) s (Slurm $$(sed -n 's/^slurm=//p' $(SLURM24_ROOT)/.slurm-llm-root))"; \
		exit $$rc; \
	fi

# The Debian packages the tests need (scripts/test-deps.sh: as root with apt-get, it installs
# what is missing; else it names it and stops), before anything else runs.
deps:
	scripts/test-deps.sh

check: deps fmt-check vet test check-shipped e2e

# check-config on every shipped tier config, nginx -t on the shipped site.
check-shipped: build
	scripts/check-shipped.sh

bench:
	scripts/bench.sh

# A busy tier (issue 38) on the real llama-server: the head reached directly, through nginx's
# shipped site and through the front door (fair share off and on), -np 2 and 4, 1, 16 and 64
# clients, a flood's throughput, nginx's and the front door's clients on one head at once
# (BenchmarkE2EFrontBusy; root and nginx, no Slurm). LLAMA_BIN names the build's bin directory,
# TINY_MODEL or LLAMA_MODEL the model; without LLAMA_BIN it says so and skips (`make bench` runs
# the same benchmark on the fake llama.cpp).
bench-real:
	@if [ -z "$(LLAMA_BIN)" ]; then \
		echo "bench-real: skipped: LLAMA_BIN is not set (the bin directory of a llama.cpp build with llama-server; the model in TINY_MODEL or LLAMA_MODEL)"; \
	else \
		LLAMA_BIN=$(LLAMA_BIN) TINY_MODEL=$(TINY_MODEL) LLAMA_MODEL=$(LLAMA_MODEL) \
		$(GO) test -tags e2e -count=1 -run '^$$' -bench 'BenchmarkE2EFrontBusy$$|BenchmarkE2ERealConversationAffinity' -benchtime 1x -timeout 30m -v ./endpoints/front; \
	fi

fuzz:
	scripts/fuzz.sh 20s

demo:
	scripts/demo.sh

install: build
	scripts/install.sh --destdir "$(DESTDIR)" --prefix "$(PREFIX)" --sysconfdir "$(SYSCONFDIR)" --unitdir "$(UNITDIR)"

# .rpm and .deb of slurm-llm-node and slurm-llm-controller (scripts/package.sh; nfpm as a go
# tool, so no rpmbuild): into dist/, or OUT=DIR.
OUT ?= dist
package:
	scripts/package.sh --out $(OUT)

clean:
	rm -rf bin dist
