# kernel/seccomp and `nodeshim seccomp`: libseccomp-dev (cgo) is already in
# APT_PACKAGES; the real-kernel tests run util-linux's setarch/unshare,
# getent (libc-bin) and dash, all in Debian's base system. The tests of
# kernel/seccomp start goroutines (cache) and run again under -race.
APT_PACKAGES += libseccomp-dev util-linux dash libc-bin
RACE_PKGS += ./kernel/seccomp/...
