# The reporter (`nodeshim reporter`, cluster/reporter) and the Kubernetes test
# control plane of testenv/kubetest: a real kube-apiserver and a real etcd,
# started by the tests on 127.0.0.1 ports.
#
# kube-apiserver is built from the Go module proxy in its own tools module
# under $(KUBE_TOOLS_MOD), never in nodeshim's go.mod: k8s.io/kubernetes is
# pinned and every k8s.io/<staging> module it requires as v0.0.0 (its own
# go.mod maps them to ./staging, which a dependent module cannot see) is
# replaced with its published version of the same minor. All four commands
# took 23.5 minutes cold (module downloads included, kube-apiserver 17 of
# them) at load 8-11 on 2 cores; the Go build cache makes later builds fast.
#
# etcd is Debian trixie's etcd-server, unpacked into $(ETCD_PREFIX) by
# deb-prefix (Makefile). Its binary is static Go and runs here as is.
# Both are needed by the tests only, never by `make run`.
#
# The tests find both through NODESHIM_KUBE_APISERVER and NODESHIM_ETCD.
#
# kubelet, kube-controller-manager and kube-scheduler (the single-node
# cluster of testenv/clustertest) build in the same tools module with the
# same version stamp; tools.go imports all four commands so that one
# `go mod tidy` records every module they need (kubelet alone adds cadvisor
# and a few more). Each binary is keyed by version under $(TOOLS)/bin; the
# tests find them through NODESHIM_KUBELET, NODESHIM_KUBE_CONTROLLER_MANAGER
# and NODESHIM_KUBE_SCHEDULER.

# 1.37 runs on this hybrid host with failCgroupV1: false (testenv/clustertest
# sets it) and is the node guest's kubelet (testenv/nodevm): one version for
# both, built once.
KUBE_VERSION    := 1.37.2
KUBE_STAGING_VERSION := v0.37.2
KUBE_STAGING    := api apiextensions-apiserver apimachinery apiserver cli-runtime client-go \
	cloud-provider cluster-bootstrap code-generator component-base component-helpers \
	controller-manager cri-api cri-client csi-translation-lib dynamic-resource-allocation \
	endpointslice externaljwt kms kube-aggregator kube-controller-manager kube-proxy \
	kube-scheduler kubectl kubelet metrics mount-utils pod-security-admission \
	sample-apiserver sample-cli-plugin sample-controller cri-streaming streaming
KUBE_TOOLS_MOD  := $(TOOLS)/kube-$(KUBE_VERSION)
KUBE_APISERVER  := $(TOOLS)/bin/kube-apiserver-$(KUBE_VERSION)
KUBE_COMMANDS   := kube-apiserver kube-controller-manager kube-scheduler kubelet
KUBE_NODE_BINS  := $(foreach c,kubelet kube-controller-manager kube-scheduler,$(TOOLS)/bin/$(c)-$(KUBE_VERSION))
KUBE_TOOLS_SUM  := $(KUBE_TOOLS_MOD)/go.sum
# What Kubernetes' own build stamps in (hack/lib/version.sh), so that
# --version and /version say which release this is.
kube-ldflags     = -X k8s.io/component-base/version.gitVersion=v$(1) \
	-X k8s.io/component-base/version.gitMajor=$(word 1,$(subst ., ,$(1))) \
	-X k8s.io/component-base/version.gitMinor=$(word 2,$(subst ., ,$(1))) \
	-X k8s.io/component-base/version.gitTreeState=clean
KUBE_LDFLAGS    := $(call kube-ldflags,$(KUBE_VERSION))

# The node guest's Kubernetes (testenv/nodevm): kubelet at the newest minor
# the proxy serves, and the control plane it joins at the same version (a
# kubelet newer than its API server is outside the version skew policy): the
# host's own, from the same tools module.
KUBE_GUEST_VERSION := $(KUBE_VERSION)
KUBE_GUEST_BINS := $(foreach c,$(KUBE_COMMANDS),$(TOOLS)/bin/$(c)-$(KUBE_GUEST_VERSION))

ETCD_SUITE      := trixie
ETCD_PREFIX     := $(TOOLS)/etcd-$(ETCD_SUITE)
ETCD_APT        := $(CACHE)/apt-etcd-$(ETCD_SUITE)
ETCD            := $(ETCD_PREFIX)/usr/bin/etcd

TEST_DEPS += kube-testenv

export NODESHIM_KUBE_APISERVER := $(KUBE_APISERVER)
export NODESHIM_ETCD := $(ETCD)
export NODESHIM_KUBELET := $(TOOLS)/bin/kubelet-$(KUBE_VERSION)
export NODESHIM_KUBE_CONTROLLER_MANAGER := $(TOOLS)/bin/kube-controller-manager-$(KUBE_VERSION)
export NODESHIM_KUBE_SCHEDULER := $(TOOLS)/bin/kube-scheduler-$(KUBE_VERSION)

.PHONY: kube-testenv kube-node kube-guest
## kube-testenv: build the Kubernetes binaries and unpack etcd for the tests
kube-testenv: $(KUBE_APISERVER) $(KUBE_NODE_BINS) $(ETCD)
## kube-node: build kubelet, kube-controller-manager and kube-scheduler
kube-node: $(KUBE_NODE_BINS)
## kube-guest: build the node guest's Kubernetes $(KUBE_GUEST_VERSION) (kubelet and its control plane)
kube-guest: $(KUBE_GUEST_BINS) $(ETCD)

# The tools module, written and tidied once for all four commands. A module
# written by an older version of this file (kube-apiserver only) is
# rewritten: its tools.go lacks kubelet.
# $(call kube-tools-mod,DIR,VERSION,STAGING_VERSION,STAGING): write and tidy
# the tools module DIR for k8s.io/kubernetes VERSION.
define kube-tools-mod
	@mkdir -p $(1)
	cd $(1) && { \
		echo 'module nodeshim.local/kubetools'; echo; echo 'go 1.24'; echo; \
		echo 'require k8s.io/kubernetes v$(2)'; echo; \
		for m in $(4); do echo "replace k8s.io/$$m => k8s.io/$$m $(3)"; done; \
	} > go.mod && { \
		echo '//go:build tools'; echo; echo 'package kubetools'; echo; echo 'import ('; \
		for c in $(KUBE_COMMANDS); do printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' $$c; done; \
		echo ')'; \
	} > tools.go
	cd $(1) && $(GO) mod tidy
endef

$(KUBE_TOOLS_SUM):
	$(call kube-tools-mod,$(KUBE_TOOLS_MOD),$(KUBE_VERSION),$(KUBE_STAGING_VERSION),$(KUBE_STAGING))

.PHONY: kube-tools-mod
kube-tools-mod:
	@grep -q 'cmd/kubelet"' $(KUBE_TOOLS_MOD)/tools.go 2>/dev/null || { rm -f $(KUBE_TOOLS_SUM); $(MAKE) --no-print-directory $(KUBE_TOOLS_SUM); }

# $(TOOLS)/bin/COMMAND-$(KUBE_VERSION): one Kubernetes command, stamped.
$(TOOLS)/bin/%-$(KUBE_VERSION): | kube-tools-mod
	@mkdir -p $(TOOLS)/bin
	cd $(KUBE_TOOLS_MOD) && $(GO) build -trimpath -ldflags '$(KUBE_LDFLAGS)' -o $@.tmp k8s.io/kubernetes/cmd/$*
	$@.tmp --version | grep -qF 'v$(KUBE_VERSION)'
	mv $@.tmp $@

$(ETCD):
	$(call deb-prefix,$(ETCD_APT),$(ETCD_SUITE),etcd-server,$(ETCD_PREFIX),$(ETCD_PREFIX).tmp/usr/bin/etcd --version)

# bench-fleet: 1,000 simulated nodes against one API server (BenchmarkFleet
# in e2e/fleet): each a real reporter over an in-process shim, with the
# controller, beside kubelet's own heartbeat for the same nodes; 7-9
# minutes on 2 shared cores. `make bench` runs it too, with the same defaults. FLEET_FLAGS
# change the shape, e.g. -fleet.nodes=200 -fleet.idle=5m; -short is 50 nodes
# in under a minute.
FLEET_FLAGS ?=

.PHONY: bench-fleet
## bench-fleet: 1,000 simulated nodes against one API server (results in BENCHMARKS.md)
bench-fleet: deps kube-testenv
	@mkdir -p $(CACHE)
	$(GO) test -count=1 -v -run '^$$' -bench '^BenchmarkFleet$$' -benchtime 1x -timeout 30m ./e2e/fleet \
		$(FLEET_FLAGS) 2>&1 | grep -v '^I[0-9]\{4\} ' | tee $(CACHE)/bench-fleet.log
	@! grep -qE '^(--- FAIL|FAIL)' $(CACHE)/bench-fleet.log
