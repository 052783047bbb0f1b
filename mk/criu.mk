# CRIU and checkpointctl for the criu/ package, its tests and `make run`.
#
# CRIU: the system's criu is used when it passes `criu check`. Otherwise
# (bookworm's 3.17.1 fails on kernels >= 6.13: "vdso: Unexpected rt vDSO area
# bounds"), Debian trixie's criu 4.1.1 and the libraries it links are
# downloaded with a private apt configuration (own sources list, state and
# cache directories; the machine's apt setup is not touched), unpacked with
# `dpkg -x` into $(CRIU_PREFIX), and run through that prefix's own dynamic
# loader by the wrapper script $(CRIU_WRAPPER). The machine's libc is never
# replaced.
#
# $(CRIU_WRAPPER) (.tools/bin/criu) is always a wrapper: either an `exec` of the
# system's criu or of the private prefix. Tests and `nodeshim checkpoint`
# find criu through criu.Find: an explicit path (--criu-path), then
# $NODESHIM_CRIU, then `criu` on PATH, then /usr/sbin/criu. This file
# exports NODESHIM_CRIU (and NODESHIM_CHECKPOINTCTL) so that `make test`,
# `make bench` and `make run` use the wrapper.

CRIU_SUITE     := trixie
CRIU_PREFIX    := $(TOOLS)/criu-$(CRIU_SUITE)
CRIU_APT       := $(CACHE)/apt-$(CRIU_SUITE)
CRIU_WRAPPER   := $(TOOLS)/bin/criu
# criu and its libraries, and the tar, gzip and sh (dash) it runs for the
# content of a container's tmpfs mounts (the image carries them: see the
# Dockerfile).
CRIU_PACKAGES  := criu libcompel1 libc6 libgnutls30t64 libnettle8t64 libhogweed6t64 \
	libp11-kit0 libunistring5 libidn2-0 libtasn1-6 libgmp10 libnftables1 libnl-3-200 \
	libprotobuf-c1 libnet1 libbsd0 libmd0 libuuid1 libjansson4 libmnl0 libnftnl11 \
	libxtables12 libffi8 tar gzip libacl1 libselinux1 libpcre2-8-0 dash
CHECKPOINTCTL_VERSION := v1.6.0
CHECKPOINTCTL  := $(TOOLS)/bin/checkpointctl

# e2fsprogs (mkfs.ext4) and mount for the ext4 test.
TEST_APT_PACKAGES += e2fsprogs mount
TEST_DEPS += criu-tools
RUN_DEPS  += $(CRIU_WRAPPER)

export NODESHIM_CRIU := $(CRIU_WRAPPER)
# deploy/'s test image takes CRIU, the programs it runs, and their
# libraries from the prefix, as the Dockerfile takes them from trixie's
# packages, even where the system's criu is the one the wrapper runs. The
# stamp names the package list, so that a prefix unpacked from another list
# is unpacked again.
export NODESHIM_CRIU_ROOT := $(CRIU_PREFIX)
CRIU_STAMP := $(CRIU_PREFIX)/.packages-$(shell echo '$(CRIU_PACKAGES)' | cksum | cut -d' ' -f1)
TEST_DEPS += $(CRIU_STAMP)
export NODESHIM_CHECKPOINTCTL := $(CHECKPOINTCTL)

.PHONY: criu-tools
criu-tools: $(CRIU_WRAPPER) $(CHECKPOINTCTL)

# The wrapper keeps every argument and every inherited file descriptor:
# go-criu starts `criu swrk FD` with the RPC socket as an extra fd. The
# sub-make runs through CRIU_SUBMAKE rather than $(MAKE) itself so that
# `make -n` prints this recipe instead of running it.
CRIU_SUBMAKE = $(MAKE) --no-print-directory
$(CRIU_WRAPPER):
	@mkdir -p $(TOOLS)/bin
	@sys=$$(command -v criu || true); \
	if [ -n "$$sys" ] && "$$sys" check >/dev/null 2>&1; then \
		echo "criu: using the system's $$sys (criu check passes)"; \
		printf '#!/bin/sh\nexec %s "$$@"\n' "$$sys" > $@.tmp; \
	else \
		echo "criu: system criu missing or failing criu check; installing $(CRIU_SUITE)'s into $(CRIU_PREFIX)"; \
		$(CRIU_SUBMAKE) $(CRIU_STAMP); \
		printf '#!/bin/sh\nexec %s/usr/lib64/ld-linux-x86-64.so.2 --library-path %s/usr/lib/x86_64-linux-gnu %s/usr/sbin/criu "$$@"\n' \
			"$(CRIU_PREFIX)" "$(CRIU_PREFIX)" "$(CRIU_PREFIX)" > $@.tmp; \
	fi; \
	chmod 0755 $@.tmp; \
	$@.tmp --version >/dev/null; \
	$@.tmp check || { echo "criu check fails with $$(head -c 300 $@.tmp)" >&2; rm -f $@.tmp; exit 1; }; \
	mv $@.tmp $@

$(CRIU_STAMP):
	$(CRIU_SUBMAKE) criu-prefix
	touch $@

.PHONY: criu-prefix
criu-prefix:
	$(call deb-prefix,$(CRIU_APT),$(CRIU_SUITE),$(CRIU_PACKAGES),$(CRIU_PREFIX))

$(CHECKPOINTCTL):
	GOBIN=$(TOOLS)/bin $(GO) install github.com/checkpoint-restore/checkpointctl@$(CHECKPOINTCTL_VERSION)
