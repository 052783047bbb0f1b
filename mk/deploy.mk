# deploy/: the kustomize manifests, the Dockerfile's static build and the
# footprint benchmark.
#
# kubectl (tests only): Debian trixie's kubectl (the binary package of
# kubernetes-client, 1.32), unpacked into $(KUBECTL_PREFIX) by deb-prefix
# (Makefile). It needs glibc >= 2.34 and
# runs on bookworm's. The tests find it through $NODESHIM_KUBECTL and run
# `kubectl apply --dry-run=server -k deploy/` against a real kube-apiserver.

DEPLOY_SUITE   := trixie
DEPLOY_APT     := $(CACHE)/apt-$(DEPLOY_SUITE)-deploy
KUBECTL_PREFIX := $(TOOLS)/kubectl-$(DEPLOY_SUITE)
KUBECTL        := $(TOOLS)/bin/kubectl

# The static-build test links against libseccomp.a (libseccomp-dev) with
# gcc, both already in RUN_APT_PACKAGES for the build itself.
TEST_DEPS += $(KUBECTL)
export NODESHIM_KUBECTL := $(KUBECTL)

$(KUBECTL):
	@mkdir -p $(TOOLS)/bin
	$(call deb-prefix,$(DEPLOY_APT),$(DEPLOY_SUITE),kubectl,$(KUBECTL_PREFIX),$(KUBECTL_PREFIX).tmp/usr/bin/kubectl version --client)
	ln -sfn $(KUBECTL_PREFIX)/usr/bin/kubectl $@

.PHONY: kubectl
## kubectl: Debian trixie's kubectl in $(TOOLS)/bin
kubectl: $(KUBECTL)

# bench-footprint: the RSS and CPU of the shim and the reporter (publishing
# to a real kube-apiserver, mk/reporter.mk) with 1,000 pod cgroups, idle and
# during a pressure episode, for about 3.5 minutes (BenchmarkFootprint in
# deploy/; `make bench` runs it with its shorter defaults).
FOOTPRINT_FLAGS ?= -footprint.pods=1000 -footprint.warmup=15s -footprint.idle=120s -footprint.pressure=60s

.PHONY: bench-footprint
## bench-footprint: measure the shim's footprint (results in BENCHMARKS.md)
bench-footprint: deps kube-testenv
	@mkdir -p $(CACHE)
	$(GO) test -count=1 -v -run '^$$' -bench '^BenchmarkFootprint$$' -benchtime 1x -timeout 20m ./deploy \
		$(FOOTPRINT_FLAGS) 2>&1 | tee $(CACHE)/bench-footprint.log
	@! grep -qE '^(--- FAIL|FAIL)' $(CACHE)/bench-footprint.log
