# kernel/seccomp and `nodeshim seccomp`: libseccomp-dev (cgo) is already in
# RUN_APT_PACKAGES; the real-kernel tests run util-linux's setarch/unshare,
# getent (libc-bin) and dash, all in Debian's base system.
TEST_APT_PACKAGES += util-linux dash libc-bin
# shim/profiles/ociprofile reads signed profiles from a real OCI registry on
# loopback (testenv/registrytest): Debian's docker-registry, distribution 2.8.
TEST_APT_PACKAGES += docker-registry
