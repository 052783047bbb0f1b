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

# containerd v2.4.2, which has no restore of its own: nodeshim's
# RuntimeClass (runtimes/restoring) must restore there too. Same build.
CONTAINERD24_VERSION := v2.4.2
CONTAINERD24_DIR     := $(TOOLS)/containerd-$(CONTAINERD24_VERSION)/bin
CONTAINERD24         := $(CONTAINERD24_DIR)/containerd
export NODESHIM_CONTAINERD24 := $(CONTAINERD24_DIR)

.PHONY: runtime-testenv runtime-check
## runtime-testenv: build crictl and containerd 2.x, check the runtimes the container tests start
runtime-testenv: $(CRICTL) $(CONTAINERD2) $(CONTAINERD24) runtime-check

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

$(CONTAINERD24):
	rm -rf $(CONTAINERD24_DIR).tmp
	@mkdir -p $(CONTAINERD24_DIR).tmp
	GOBIN=$(CONTAINERD24_DIR).tmp CGO_ENABLED=1 $(GO) install -trimpath \
		-ldflags '-X github.com/containerd/containerd/v2/version.Version=$(CONTAINERD24_VERSION)' \
		$(foreach c,$(CONTAINERD2_CMDS),github.com/containerd/containerd/v2/cmd/$(c)@$(CONTAINERD24_VERSION))
	$(CONTAINERD24_DIR).tmp/containerd --version | grep -qF ' $(CONTAINERD24_VERSION)'
	rm -rf $(CONTAINERD24_DIR)
	mv $(CONTAINERD24_DIR).tmp $(CONTAINERD24_DIR)

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
