# deploy/: the kustomize manifests, the Dockerfile's static build and the
# footprint benchmark.
#
# kubectl: Debian trixie's kubectl (the binary package of kubernetes-client,
# 1.32), downloaded with a private apt configuration (own sources list,
# state and cache directories; the machine's apt setup is not touched) and
# unpacked with `dpkg -x` into $(KUBECTL_PREFIX). It needs glibc >= 2.34 and
# runs on bookworm's. The tests find it through $NODESHIM_KUBECTL and run
# `kubectl apply --dry-run=server -k deploy/` against a real kube-apiserver.

DEPLOY_SUITE   := trixie
DEPLOY_APT     := $(CACHE)/apt-$(DEPLOY_SUITE)-deploy
KUBECTL_PREFIX := $(TOOLS)/kubectl-$(DEPLOY_SUITE)
KUBECTL        := $(TOOLS)/bin/kubectl

# The static-build test links against libseccomp.a (libseccomp-dev) with gcc.
APT_PACKAGES += gcc libc6-dev libseccomp-dev
TEST_DEPS += $(KUBECTL)
export NODESHIM_KUBECTL := $(KUBECTL)

DEPLOY_APT_OPTS = -o Dir::Etc::sourcelist=$(DEPLOY_APT)/sources.list \
	-o Dir::Etc::sourceparts=/dev/null \
	-o Dir::State=$(DEPLOY_APT)/state \
	-o Dir::State::Lists=$(DEPLOY_APT)/state/lists \
	-o Dir::State::status=$(DEPLOY_APT)/state/status \
	-o Dir::Cache=$(DEPLOY_APT)/cache \
	-o Debug::NoLocking=1 -o APT::Sandbox::User=root

$(KUBECTL):
	@mkdir -p $(DEPLOY_APT)/state/lists/partial $(DEPLOY_APT)/cache/archives/partial $(DEPLOY_APT)/debs $(TOOLS)/bin
	@touch $(DEPLOY_APT)/state/status
	@echo 'deb http://deb.debian.org/debian $(DEPLOY_SUITE) main' > $(DEPLOY_APT)/sources.list
	apt-get $(DEPLOY_APT_OPTS) -qq update
	rm -f $(DEPLOY_APT)/debs/kubectl_*.deb
	cd $(DEPLOY_APT)/debs && apt-get $(DEPLOY_APT_OPTS) -qq download kubectl
	rm -rf $(KUBECTL_PREFIX).tmp && mkdir -p $(KUBECTL_PREFIX).tmp
	dpkg -x $(DEPLOY_APT)/debs/kubectl_*.deb $(KUBECTL_PREFIX).tmp
	$(KUBECTL_PREFIX).tmp/usr/bin/kubectl version --client
	rm -rf $(KUBECTL_PREFIX) && mv $(KUBECTL_PREFIX).tmp $(KUBECTL_PREFIX)
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
