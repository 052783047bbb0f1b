# cgroup/: PSI watchers and the pressure Monitor start goroutines, so the
# package's tests run again under the race detector. Its real-kernel tests
# need nothing beyond the kernel and root.
RACE_PKGS += ./cgroup/...
