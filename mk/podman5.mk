# podman 5 for runtimes/podman's tests: podman 5 keeps its state in SQLite
# (<graph root>/db.sql) where podman 4 (bookworm's 4.3.1, the machine's)
# keeps a BoltDB, and nodeshim reads both.
#
# Debian trixie's podman 5.4.2, conmon, netavark and the libraries they
# link are downloaded with a private apt configuration and unpacked into
# $(PODMAN5_PREFIX) by deb-prefix (Makefile). Their ELF interpreter and
# RPATH are then pointed at the prefix's own loader and libraries with
# patchelf, rather than running them through the loader on the command
# line: podman re-executes itself (/proc/self/exe: containers/storage's
# chrooted layer unpacking, conmon's exit command) and runs conmon and
# netavark as programs, which a loader command line would not survive.
# The machine's libc is never replaced. The OCI runtime is the machine's
# runc (trixie's crun refuses this machine's hybrid cgroup layout).
# The tests find podman 5 as $NODESHIM_PODMAN5 and its helpers (conmon,
# netavark) under $NODESHIM_PODMAN5_ROOT.

PODMAN5_SUITE    := trixie
PODMAN5_PREFIX   := $(TOOLS)/podman5-$(PODMAN5_SUITE)
PODMAN5_APT      := $(CACHE)/apt-$(PODMAN5_SUITE)-podman5
PODMAN5_PACKAGES := podman conmon netavark libc6 libgcc-s1 libgpgme11t64 libassuan9 \
	libgpg-error0 libseccomp2 libsqlite3-0 libsubid5 libglib2.0-0t64 libsystemd0 \
	libcap2 libaudit1 libcap-ng0 libselinux1 libpcre2-8-0 libffi8 libmount1 \
	libblkid1 zlib1g libgcrypt20 liblz4-1 liblzma5 libzstd1 libsemanage2 libbsd0 \
	libmd0 libsepol2 libbz2-1.0
PODMAN5_BINARIES := usr/bin/podman usr/bin/conmon usr/lib/podman/netavark
PODMAN5_STAMP    := $(PODMAN5_PREFIX)/.packages-$(shell echo '$(PODMAN5_PACKAGES)' | cksum | cut -d' ' -f1)

TEST_APT_PACKAGES += patchelf
TEST_DEPS += $(PODMAN5_STAMP)
export NODESHIM_PODMAN5 := $(PODMAN5_PREFIX)/usr/bin/podman
export NODESHIM_PODMAN5_ROOT := $(PODMAN5_PREFIX)

# The check patches the unpacked tree (PREFIX.tmp, whose binaries then
# name the final PREFIX) and proves the loader and libraries resolve by
# running podman --version from the tree's final place: deb-prefix moves
# it there right after.
PODMAN5_PATCH = cd $(PODMAN5_PREFIX).tmp && for b in $(PODMAN5_BINARIES); do \
	patchelf --set-interpreter $(PODMAN5_PREFIX)/usr/lib64/ld-linux-x86-64.so.2 \
		--force-rpath --set-rpath $(PODMAN5_PREFIX)/usr/lib/x86_64-linux-gnu:$(PODMAN5_PREFIX)/lib/x86_64-linux-gnu $$b || exit 1; \
	done

$(PODMAN5_STAMP):
	@command -v patchelf >/dev/null || { echo 'podman5: needs patchelf (make test-apt-deps)' >&2; exit 1; }
	$(call deb-prefix,$(PODMAN5_APT),$(PODMAN5_SUITE),$(PODMAN5_PACKAGES),$(PODMAN5_PREFIX),$(PODMAN5_PATCH))
	$(NODESHIM_PODMAN5) --version | grep -q '^podman version 5\.'
	touch $@

.PHONY: podman5
## podman5: Debian trixie's podman 5 (SQLite state) in $(PODMAN5_PREFIX), for runtimes/podman's tests
podman5: $(PODMAN5_STAMP)
