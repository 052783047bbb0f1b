# nodeshim's build, run and test entry points. `make run` and `make test` work
# on a fresh Debian machine as root: they install what is missing first.
# `make run` installs only what building and running need; what only the
# tests need (QEMU, a kube-apiserver, ...) is installed by `make test`.
# Each facility adds its own prerequisites in mk/*.mk (RUN_APT_PACKAGES,
# TEST_APT_PACKAGES, RUN_DEPS, TEST_DEPS) so that this file stays small.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := build

GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
COMMIT  ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT)
# The Dockerfile's build tags that change the binary's content: grpcnotrace
# (see the Dockerfile).
GOTAGS  := grpcnotrace

# Everything installed by the Makefile lives under .tools and .cache (both
# git-ignored), never in the machine's own directories, except Debian packages
# installed through apt-get.
TOOLS := $(CURDIR)/.tools
CACHE := $(CURDIR)/.cache
BIN   := $(CURDIR)/bin/nodeshim

STATICCHECK_VERSION := v0.8.2
STATICCHECK := $(TOOLS)/bin/staticcheck

# Debian packages that building and running nodeshim need (`make build`,
# `make run`), and those that only the tests need; mk/*.mk add to both.
# ca-certificates: the Go module proxy over https.
RUN_APT_PACKAGES  := gcc libc6-dev pkg-config libseccomp-dev ca-certificates
TEST_APT_PACKAGES :=
# Targets that must be ready before the main job / the tests run.
RUN_DEPS  :=
TEST_DEPS := test-apt-deps

# Privileged tests fail instead of skipping unless told otherwise
# (make test NODESHIM_REQUIRE_PRIVILEGED=0 on a workstation).
NODESHIM_REQUIRE_PRIVILEGED ?= 1
export NODESHIM_REQUIRE_PRIVILEGED

# $(call apt-install,PACKAGES): a recipe line installing those of the Debian
# PACKAGES that are missing, through the machine's apt.
define apt-install
@missing=$$(for p in $(1); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "apt-get install: $$missing"; \
		[ "$$(id -u)" = 0 ] || { echo "need root to install: $$missing" >&2; exit 1; }; \
		DEBIAN_FRONTEND=noninteractive apt-get update -qq; \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi
endef

# $(call deb-prefix,APT_DIR,SUITE,PACKAGES,PREFIX,CHECK): recipe lines that
# download the Debian PACKAGES of SUITE with a private apt configuration
# (sources list, state and cache under APT_DIR; the machine's apt setup is
# not touched), unpack them with `dpkg -x` into PREFIX.tmp, run CHECK (a
# command on the unpacked tree, or nothing), then move PREFIX.tmp to PREFIX.
deb-apt-opts = -o Dir::Etc::sourcelist=$(1)/sources.list \
	-o Dir::Etc::sourceparts=/dev/null \
	-o Dir::State=$(1)/state \
	-o Dir::State::Lists=$(1)/state/lists \
	-o Dir::State::status=$(1)/state/status \
	-o Dir::Cache=$(1)/cache \
	-o Debug::NoLocking=1 -o APT::Sandbox::User=root
define deb-prefix
@mkdir -p $(1)/state/lists/partial $(1)/cache/archives/partial $(1)/debs
	@touch $(1)/state/status
	@echo 'deb http://deb.debian.org/debian $(2) main' > $(1)/sources.list
	apt-get $(call deb-apt-opts,$(1)) -qq update
	rm -f $(1)/debs/*.deb
	cd $(1)/debs && apt-get $(call deb-apt-opts,$(1)) -qq download $(3)
	rm -rf $(4).tmp && mkdir -p $(4).tmp
	for d in $(1)/debs/*.deb; do dpkg -x "$$d" $(4).tmp; done
	$(if $(5),$(5),@:)
	rm -rf $(4) && mv $(4).tmp $(4)
endef

include $(sort $(wildcard mk/*.mk))

.PHONY: build run test bench lint deps apt-deps test-apt-deps go-deps clean

## deps: install the missing Debian packages that building and running need, and download Go modules
deps: apt-deps go-deps

apt-deps:
	$(call apt-install,$(RUN_APT_PACKAGES))

## test-apt-deps: install the missing Debian packages that only the tests need
test-apt-deps:
	$(call apt-install,$(TEST_APT_PACKAGES))

go-deps:
	$(GO) mod download

## build: build bin/nodeshim, bin/nodeshim-reporter, the RuntimeClass handler's bin/nodeshim-runc{,-restore} and the kubectl plugin bin/kubectl-nodeshim
build: deps
	$(GO) build -trimpath -tags $(GOTAGS) -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/nodeshim
	$(GO) build -trimpath -tags $(GOTAGS) -ldflags '$(LDFLAGS)' -o $(BIN)-reporter ./cmd/nodeshim-reporter
	$(GO) build -trimpath -tags $(GOTAGS) -ldflags '$(LDFLAGS)' -o $(BIN)-runc ./cmd/nodeshim-runc
	$(GO) build -trimpath -tags $(GOTAGS) -ldflags '$(LDFLAGS)' -o $(BIN)-runc-restore ./cmd/nodeshim-runc-restore
	$(GO) build -trimpath -tags $(GOTAGS) -o $(dir $(BIN))kubectl-nodeshim ./cmd/kubectl-nodeshim

## run: build and run the main job on the embedded default configuration
run: build $(RUN_DEPS)
	$(BIN) $(RUN_ARGS)

$(STATICCHECK):
	GOBIN=$(TOOLS)/bin $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

## lint: gofmt, go vet and staticcheck
lint: deps $(STATICCHECK)
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(STATICCHECK) ./...

## test: lint, then every test as root under the race detector; a skip fails the run
# One `go test -race` run of every package rather than a plain run and a
# second -race run of a hand-kept list: the list's packages cost their plain
# run on top (criu 26 s plain + 35 s -race, shim/daemon 3.4 s + 13.7 s),
# more than -race adds to the others (cmd/nodeshim 19 s -> 27 s, deploy
# 17 s under -race), and no package is left out of the race detector. Skips need no check here: every skip goes through
# testenv/testutil, which fails it under NODESHIM_REQUIRE_PRIVILEGED=1
# (TestEverySkipGoesThroughTheGate holds the tree to that). A package's
# time includes its wait for the machine's one cluster (clustertest's lock)
# while another package's runs, hence 30 minutes rather than go test's 10.
test: lint $(TEST_DEPS)
	@mkdir -p $(CACHE)
	$(GO) test -count=1 -race -v -timeout 30m ./... 2>&1 | tee $(CACHE)/test.log | grep -E '^(---|===|ok|FAIL|PASS|panic|WARNING: DATA RACE|\s+\S+_test\.go)' | grep -v '^=== ' || true
	@if grep -qE '^(FAIL|--- FAIL|panic:|WARNING: DATA RACE)' $(CACHE)/test.log; then grep -vE '^(=== |\s*--- PASS|PASS$$)' $(CACHE)/test.log | tail -300; echo "tests failed: see $(CACHE)/test.log"; exit 1; fi
	$(MAKE) --no-print-directory vmtest vmtest-faults KERNELS="$(TEST_KERNELS)"
	$(MAKE) --no-print-directory vmtest-node
	@echo "$$(grep -cE '^\s*--- PASS' $(CACHE)/test.log) passed, $$(grep -cE '^\s*--- FAIL' $(CACHE)/test.log) failed, $$(grep -cE '^\s*--- SKIP' $(CACHE)/test.log) skipped"

## bench: run the benchmarks (results are written up in BENCHMARKS.md)
bench: deps $(TEST_DEPS)
	$(GO) test -run '^$$' -bench . -benchmem -count=1 -timeout 30m ./... | tee $(CACHE)/bench.log

clean:
	rm -rf bin $(CACHE)
