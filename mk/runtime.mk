# Real container runtimes for the tests (testenv/runtimetest): Debian
# bookworm's containerd 1.6 (CRI plugin), runc, crun, podman with conmon,
# the CNI plugins (containerd's pod network), busybox-static (the test
# image's userland; the pause image is compiled with gcc -static, which
# RUN_APT_PACKAGES' gcc and libc6-dev provide), and crictl.
#
# The tests start each runtime themselves on private state under a temporary
# directory (config, root, state, sockets); nothing here configures or
# starts the machine's runtimes. Installing the packages starts nothing on a
# machine without systemd (containerd's and podman's units are only linked
# for systemd; neither ships an init script): runtime-check says so if a
# containerd does listen on the machine's default socket, which the tests
# never use.
#
# crictl is built from the Go module proxy (sigs.k8s.io/cri-tools; the proxy
# serves v1.34.0 and v1.37.0, v1.33.0 is refused) into .tools, keyed by
# version, with the version stamped as cri-tools' own build does. The tests
# find it through NODESHIM_CRICTL. Needed by the tests only, never by
# `make run`.
#
# containerd 2.x is the second containerd peer (CRI CheckpointContainer, and
# restore through CreateContainer, which v2.3 is the last to have: v2.4
# removed it). containerd, containerd-shim-runc-v2 and ctr are built from
# the Go module proxy with cgo (they link only libc) into
# .tools/containerd-VERSION/bin, which the tests find through
# NODESHIM_CONTAINERD2; Debian's containerd 1.6 stays the first peer.
# About 70 s to build, once per version.

CRICTL_VERSION := v1.34.0
CRICTL_GOBIN   := $(TOOLS)/crictl-$(CRICTL_VERSION)
CRICTL         := $(TOOLS)/bin/crictl-$(CRICTL_VERSION)

TEST_APT_PACKAGES += containerd runc crun podman conmon containernetworking-plugins busybox-static
TEST_DEPS += runtime-testenv

CONTAINERD2_VERSION := v2.3.7
CONTAINERD2_DIR     := $(TOOLS)/containerd-$(CONTAINERD2_VERSION)/bin
CONTAINERD2         := $(CONTAINERD2_DIR)/containerd
CONTAINERD2_CMDS    := containerd containerd-shim-runc-v2 ctr

export NODESHIM_CRICTL := $(CRICTL)
export NODESHIM_CONTAINERD2 := $(CONTAINERD2_DIR)

# containerd v2.2.9, and v2.4.2, which has no restore of its own: nodeshim's
# RuntimeClass (runtimes/restoring, e2e/runtimeclass) must restore on each.
# Same build, by the pattern rule below, into .tools/containerd-VERSION/bin.
# (mk/node.mk, included first, names v2.4.2's directory: the node runs it too.)
CONTAINERD_PEERS := $(TOOLS)/containerd-v2.2.9/bin/containerd $(NODE_CONTAINERD24_DIR)/containerd
export NODESHIM_CONTAINERD22 := $(TOOLS)/containerd-v2.2.9/bin
export NODESHIM_CONTAINERD24 := $(NODE_CONTAINERD24_DIR)

.PHONY: runtime-testenv runtime-check
## runtime-testenv: build crictl and containerd 2.x, check the runtimes the container tests start
runtime-testenv: $(CRICTL) $(CONTAINERD2) $(CONTAINERD_PEERS) runtime-check

$(CRICTL):
	@mkdir -p $(TOOLS)/bin
	rm -rf $(CRICTL_GOBIN)
	GOBIN=$(CRICTL_GOBIN) $(GO) install -trimpath \
		-ldflags '-X sigs.k8s.io/cri-tools/pkg/version.Version=$(CRICTL_VERSION)' \
		sigs.k8s.io/cri-tools/cmd/crictl@$(CRICTL_VERSION)
	$(CRICTL_GOBIN)/crictl --version | grep -qF '$(CRICTL_VERSION)'
	mv $(CRICTL_GOBIN)/crictl $@
	rmdir $(CRICTL_GOBIN)

$(CONTAINERD2):
	rm -rf $(CONTAINERD2_DIR).tmp
	@mkdir -p $(CONTAINERD2_DIR).tmp
	GOBIN=$(CONTAINERD2_DIR).tmp CGO_ENABLED=1 $(GO) install -trimpath \
		-ldflags '-X github.com/containerd/containerd/v2/version.Version=$(CONTAINERD2_VERSION)' \
		$(foreach c,$(CONTAINERD2_CMDS),github.com/containerd/containerd/v2/cmd/$(c)@$(CONTAINERD2_VERSION))
	$(CONTAINERD2_DIR).tmp/containerd --version | grep -qF ' $(CONTAINERD2_VERSION)'
	rm -rf $(CONTAINERD2_DIR)
	mv $(CONTAINERD2_DIR).tmp $(CONTAINERD2_DIR)

$(TOOLS)/containerd-%/bin/containerd:
	rm -rf $(@D).tmp
	@mkdir -p $(@D).tmp
	GOBIN=$(@D).tmp CGO_ENABLED=1 $(GO) install -trimpath \
		-ldflags '-X github.com/containerd/containerd/v2/version.Version=$*' \
		$(foreach c,$(CONTAINERD2_CMDS),github.com/containerd/containerd/v2/cmd/$(c)@$*)
	$(@D).tmp/containerd --version | grep -qF ' $*'
	rm -rf $(@D)
	mv $(@D).tmp $(@D)

# Each binary the tests run, and a note (not a failure) when the machine's
# own containerd is running: the tests use their own sockets and state, so
# the two do not meet.
runtime-check: test-apt-deps
	@for b in containerd ctr containerd-shim-runc-v2 runc crun podman conmon busybox gcc unshare; do \
		command -v $$b >/dev/null || { echo "runtime-check: $$b not found on PATH" >&2; exit 1; }; \
	done
	@test -x /usr/lib/cni/bridge || { echo "runtime-check: /usr/lib/cni/bridge missing (containernetworking-plugins)" >&2; exit 1; }
	@if [ -S /run/containerd/containerd.sock ]; then \
		echo "runtime-check: note: a containerd listens on /run/containerd/containerd.sock; the tests run their own on private sockets"; \
	fi
