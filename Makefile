# nodeshim's build, run and test entry points. `make run` and `make test` work
# on a fresh Debian machine as root: they install what is missing first.
# Each facility adds its own prerequisites in mk/*.mk (APT_PACKAGES, TEST_DEPS,
# RUN_DEPS, RACE_PKGS) so that this file stays small.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := build

GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
COMMIT  ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT)

# Everything installed by the Makefile lives under .tools and .cache (both
# git-ignored), never in the machine's own directories, except Debian packages
# installed through apt-get.
TOOLS := $(CURDIR)/.tools
CACHE := $(CURDIR)/.cache
BIN   := $(CURDIR)/bin/nodeshim

STATICCHECK_VERSION := v0.8.2
STATICCHECK := $(TOOLS)/bin/staticcheck

# Debian packages the build and the tests need; mk/*.mk add to it.
APT_PACKAGES := gcc libc6-dev pkg-config libseccomp-dev
# Targets that must be ready before the tests / the main job run.
TEST_DEPS :=
RUN_DEPS  :=
# Packages that start goroutines: their tests run again under -race.
RACE_PKGS :=

# Privileged tests fail instead of skipping unless told otherwise
# (make test NODESHIM_REQUIRE_PRIVILEGED=0 on a workstation).
NODESHIM_REQUIRE_PRIVILEGED ?= 1
export NODESHIM_REQUIRE_PRIVILEGED

include $(sort $(wildcard mk/*.mk))

.PHONY: build run test bench lint deps apt-deps go-deps clean

## deps: install missing Debian packages and download Go modules
deps: apt-deps go-deps

apt-deps:
	@missing=$$(for p in $(APT_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "apt-get install: $$missing"; \
		[ "$$(id -u)" = 0 ] || { echo "need root to install: $$missing" >&2; exit 1; }; \
		DEBIAN_FRONTEND=noninteractive apt-get update -qq; \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi

go-deps:
	$(GO) mod download

## build: build bin/nodeshim
build: deps
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/nodeshim

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

## test: lint, then every test as root; a skipped test fails the run
test: lint $(TEST_DEPS)
	@mkdir -p $(CACHE)
	$(GO) test -count=1 -v ./... 2>&1 | tee $(CACHE)/test.log | grep -E '^(---|===|ok|FAIL|PASS|panic|\s+\S+_test\.go)' | grep -v '^=== ' || true
	@if grep -qE '^(FAIL|--- FAIL|panic:)' $(CACHE)/test.log; then grep -vE '^(=== |\s*--- PASS|PASS$$)' $(CACHE)/test.log | tail -300; echo "tests failed: see $(CACHE)/test.log"; exit 1; fi
	@if [ "$(NODESHIM_REQUIRE_PRIVILEGED)" = 1 ] && grep -E '^\s*--- SKIP' $(CACHE)/test.log; then echo "tests were skipped with NODESHIM_REQUIRE_PRIVILEGED=1"; exit 1; fi
	@if [ -n "$(strip $(RACE_PKGS))" ]; then $(GO) test -count=1 -race $(RACE_PKGS); fi
	$(MAKE) --no-print-directory vmtest vmtest-faults KERNELS="$(TEST_KERNELS)"
	@echo "$$(grep -cE '^\s*--- PASS' $(CACHE)/test.log) passed, $$(grep -cE '^\s*--- FAIL' $(CACHE)/test.log) failed, $$(grep -cE '^\s*--- SKIP' $(CACHE)/test.log) skipped"

## bench: run the benchmarks (results are written up in BENCHMARKS.md)
bench: deps $(TEST_DEPS)
	$(GO) test -run '^$$' -bench . -benchmem -count=1 ./... | tee $(CACHE)/bench.log

clean:
	rm -rf bin $(CACHE)
