# The node Kubernetes runs today, as a test node: `make vmtest-node` boots a
# whole node under QEMU (TCG) and runs the node scenarios inside it; see
# testenv/nodevm. The node is pure cgroup v2 with systemd as init,
# containerd $(NODE_CONTAINERD_VERSION) as a systemd service with
# `SystemdCgroup = true` and runc $(NODE_RUNC_VERSION), and `nodeshim serve`
# as a systemd service, on Debian trixie's 6.12 kernel and userland
# (debootstrap; CRIU 4.1.1, crun 1.21, systemd 257). kubelet
# $(KUBE_GUEST_VERSION) (mk/reporter.mk's kube-guest) joins a control plane
# of the same version that the harness starts on the host's loopback; the
# node reaches it through QEMU's restricted user-mode network.
#
# runc and containerd are built from the Go module proxy on the host, once
# per version, under .tools/.cache/node; nodeshim itself and the scenarios'
# test binary are built at every run. The root filesystem (debootstrap of
# trixie through its own mirror and keyring, never the machine's apt
# sources) and the kernel (testenv/vmtest's fetcher, trixie's 6.12) are
# cached under .cache/vmtest/node. `make test` runs it after the host suite
# and the kernel matrix.

NODE_APT_PACKAGES := debootstrap e2fsprogs busybox-static cpio qemu-system-x86 debian-archive-keyring xz-utils

NODE_RUNC_VERSION       := v1.5.3
NODE_CONTAINERD_VERSION := v2.2.9
NODE_TOOLS              := $(TOOLS)/.cache/node
NODE_RUNC               := $(NODE_TOOLS)/runc-$(NODE_RUNC_VERSION)/runc
NODE_CONTAINERD_DIR     := $(NODE_TOOLS)/containerd-$(NODE_CONTAINERD_VERSION)/bin
NODE_CONTAINERD         := $(NODE_CONTAINERD_DIR)/containerd
# containerd v2.4, which has no restore of its own: a scenario runs it in
# place of the node's to restore a pod under nodeshim's RuntimeClass. The
# host tests run the same build (mk/runtime.mk's NODESHIM_CONTAINERD24).
NODE_CONTAINERD24_DIR   := $(TOOLS)/containerd-v2.4.2/bin
# Each guest's time from QEMU's start to power-off; its scenarios get
# three quarters of it (go test's -timeout). 25m (18m45s for the
# scenarios) was hit once at 21m32s by a slow TCG run whose 15 scenarios
# otherwise passed in about 17 min.
NODE_TIMEOUT ?= 32m
NODE_FLAGS   ?=
# A nodeshim binary to test instead of the one built from the tree.
NODE_NODESHIM ?=
NODEVM       := $(CACHE)/vmtest/node/bin/nodevm

.PHONY: vmtest-node node-apt-deps node-tools node-lint

node-apt-deps:
	$(call apt-install,$(NODE_APT_PACKAGES))

## node-tools: build runc and containerd for the test node (cached per version)
node-tools: $(NODE_RUNC) $(NODE_CONTAINERD) $(CRICTL)

# runc with seccomp (libseccomp is linked dynamically; the node's trixie
# libseccomp2 serves it), stamped as runc's Makefile does.
$(NODE_RUNC):
	rm -rf $(@D).tmp && mkdir -p $(@D).tmp
	GOBIN=$(@D).tmp CGO_ENABLED=1 $(GO) install -trimpath -tags seccomp \
		-ldflags '-X main.version=$(patsubst v%,%,$(NODE_RUNC_VERSION))' \
		github.com/opencontainers/runc@$(NODE_RUNC_VERSION)
	$(@D).tmp/runc --version | grep -q 'libseccomp: '
	rm -rf $(@D) && mv $(@D).tmp $(@D)

$(NODE_CONTAINERD):
	rm -rf $(NODE_CONTAINERD_DIR).tmp && mkdir -p $(NODE_CONTAINERD_DIR).tmp
	GOBIN=$(NODE_CONTAINERD_DIR).tmp CGO_ENABLED=1 $(GO) install -trimpath \
		-ldflags '-X github.com/containerd/containerd/v2/version.Version=$(NODE_CONTAINERD_VERSION)' \
		$(foreach c,$(CONTAINERD2_CMDS),github.com/containerd/containerd/v2/cmd/$(c)@$(NODE_CONTAINERD_VERSION))
	$(NODE_CONTAINERD_DIR).tmp/containerd --version | grep -qF ' $(NODE_CONTAINERD_VERSION)'
	rm -rf $(NODE_CONTAINERD_DIR) && mv $(NODE_CONTAINERD_DIR).tmp $(NODE_CONTAINERD_DIR)

$(NODEVM): go-deps $(wildcard testenv/nodevm/*.go testenv/nodevm/cmd/nodevm/*.go testenv/vmtest/*.go)
	$(GO) build -o $@ ./testenv/nodevm/cmd/nodevm

## node-lint: go vet and staticcheck the node scenarios, which only build with the nodevm tag
node-lint: deps $(STATICCHECK)
	$(GO) vet -tags nodevm ./testenv/nodevm/...
	$(STATICCHECK) -tags nodevm ./testenv/nodevm/...

## vmtest-node: boot a pure cgroup v2 systemd node (containerd 2.2, runc 1.5, kubelet 1.37) under QEMU and run the node scenarios
vmtest-node: node-apt-deps node-lint node-tools $(NODE_CONTAINERD24_DIR)/containerd kube-guest $(KUBECTL) $(CHECKPOINTCTL) $(CRIU_STAMP) $(NODEVM)
	$(NODEVM) -root $(CURDIR) -cache $(CACHE)/vmtest/node -timeout $(NODE_TIMEOUT) \
		-runc $(NODE_RUNC) -containerd $(NODE_CONTAINERD_DIR) -containerd24 $(NODE_CONTAINERD24_DIR) -crictl $(CRICTL) \
		-kubelet $(TOOLS)/bin/kubelet-$(KUBE_GUEST_VERSION) -kube-apiserver $(TOOLS)/bin/kube-apiserver-$(KUBE_GUEST_VERSION) \
		-kube-controller-manager $(TOOLS)/bin/kube-controller-manager-$(KUBE_GUEST_VERSION) -etcd $(ETCD) \
		-kube-scheduler $(TOOLS)/bin/kube-scheduler-$(KUBE_GUEST_VERSION) \
		-kubectl $(KUBECTL) -checkpointctl $(CHECKPOINTCTL) -criu-root $(CRIU_PREFIX) \
		-ldflags '$(LDFLAGS)' -tags '$(GOTAGS)' $(if $(NODE_NODESHIM),-nodeshim $(NODE_NODESHIM)) $(NODE_FLAGS)

# bench-node: criu's BenchmarkPreDump on the node, whose kernel tracks
# dirty memory (this host's does not): the frozen time of a plain dump
# beside that of a dump after two pre-dump rounds, a process of
# NODE_PREDUMP_MIB MiB rewriting 5% of its pages a second (BENCHMARKS.md,
# "Pre-copy"). The node gets the memory and the disk that needs.
NODE_PREDUMP_MIB ?= 1024
.PHONY: bench-node
## bench-node: pre-copy's frozen time on the node's kernel (results in BENCHMARKS.md)
bench-node: node-apt-deps node-tools $(CRIU_STAMP) $(NODEVM)
	$(NODEVM) -root $(CURDIR) -cache $(CACHE)/vmtest/node -timeout 40m -memory 6144 -disk 8192 \
		-runc $(NODE_RUNC) -containerd $(NODE_CONTAINERD_DIR) -crictl $(CRICTL) \
		-ldflags '$(LDFLAGS)' -tags '$(GOTAGS)' -quiet \
		-bench BenchmarkPreDump -bench-pkg ./criu -bench-env NODESHIM_PREDUMP_MIB=$(NODE_PREDUMP_MIB) \
		2>&1 | tee $(CACHE)/bench-node.log
	@! grep -qE 'nodevm: (--- FAIL|FAIL)' $(CACHE)/bench-node.log
