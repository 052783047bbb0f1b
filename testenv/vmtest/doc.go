// Package vmtest is nodeshim's kernel matrix: it runs the tests that need a
// particular kernel inside real Debian kernels booted under QEMU
// (`make vmtest KERNELS="6.1 6.12"`).
//
// For each kernel label the harness fetches the Debian kernel image package by
// name with `apt-get download`, through a private apt sources list, state and
// cache directory, and keeps the unpacked vmlinuz under the git-ignored cache
// directory. It builds one test binary per package that has guest tests or
// whose host suite the guests run (see below), packs them with busybox-static
// into an initramfs, boots
// `qemu-system-x86_64 -nographic -no-reboot -cpu max -m 2G` under TCG (never
// KVM), streams the serial console back and turns the guest's test results
// into its own exit status. A guest that panics, a test binary that is
// missing and a guest that hangs (QEMU is killed after a timeout) each fail
// the run with a message that names which.
//
// # Writing a guest test
//
// A test that needs a guest lives in a file named `*_vm_test.go` that starts
// with the build constraint `//go:build vmtest` and calls
// testutil.RequireGuest(t) first. On the host, `go test ./...` does not compile
// such files; the harness finds every package that has them, builds
// `go test -c -tags vmtest` for it and runs, in the guest, exactly the Test
// functions declared in its vmtest-tagged files, from the package's source
// directory (its testdata/ is copied into the image). The rest of the
// package's tests run there only when the package's host suite runs.
//
// # The host suite in the guest
//
// The guests also run the ordinary (untagged) tests of the packages that
// HostSuite selects: every test of such a package, compiled once on the host
// with `go test -c -tags vmtest` and run under NODESHIM_REQUIRE_PRIVILEGED=1,
// so that a test holds on a pure cgroup v2 machine with another kernel as
// well as on the hybrid host, and a skip fails. HostSuite is one explicit
// list with a reason for every package, run or left out; Discover fails on a
// package with tests that the list does not decide. A test that needs a peer
// the guests do not have (GuestLacks: go, gcc, kube-apiserver, etcd,
// kubectl, criu, checkpointctl) skips there through
// testutil.SkipIfGuestLacks, which testutil.RequireBinary calls, with a
// reason that names the peer; the init script lists them in
// NODESHIM_GUEST_LACKS. Every testdata directory of the module goes into the
// image, since some tests read another package's. `-host-suite=false` runs
// the guest tests alone (`make vmtest-faults` does).
//
// Where it runs: `make test` boots the 6.1 guest (TEST_KERNELS) with the
// host suite, and `make vmtest KERNELS=6.12` runs the same in the 6.12
// guest outside `make test`. Under TCG one guest runs the host suite in
// 7-8 min (shim/config's crash sweep, which the host's -race pass thins,
// takes 3-3.5 min of it, and this is the only full sweep CI runs); its
// test binaries cost 1-1.5 min to build with a warm cache and about 5 min
// cold. That puts a cold `make test` at about 45 min with one kernel, under
// the ~50 min a cold suite may take; a second kernel would add another
// 8-10 min and go over it. The numbers are in BENCHMARKS.md.
//
// Test binaries are linked statically (CGO_ENABLED=0) unless the package
// depends on cgo outside the standard library (libseccomp); such a binary is
// linked dynamically and the shared libraries that ldd lists, with the
// loader, are copied into the image.
//
// # The guest
//
// The init script mounts proc at /proc, sysfs at /sys, devtmpfs at /dev,
// cgroup2 at /sys/fs/cgroup (the only cgroup hierarchy: the guest is pure
// cgroup v2), tracefs at /sys/kernel/tracing, bpffs at /sys/fs/bpf and tmpfs
// at /tmp, enables every controller of cgroup.controllers in the root's
// cgroup.subtree_control, and runs the tests as root with
// NODESHIM_GUEST=<kernel label> (see testutil.InGuest),
// NODESHIM_REQUIRE_PRIVILEGED=1, so that a skip fails, and
// NODESHIM_GUEST_LACKS. There is no disk: /var/tmp does not exist. The
// modules of GuestModules come with the kernel, uncompressed; init runs
// depmod, and the kernel loads them on demand through busybox's modprobe,
// as on a node. The host programs of GuestPrograms that busybox lacks
// (util-linux's setarch and setsid, getent) are in /usr/local/bin, and
// /etc/hosts names localhost. The kernel is booted
// with psi=1. It then runs `nodeshim report -o json` when the nodeshim binary
// has a report command and keeps the output, with the console log, under
// .cache/vmtest/artifacts/<label>/.
//
// Everything the guest says about its tests comes back on the serial console
// as lines starting with Marker; files come back as a tar stream on the
// second serial port.
//
// `make vmtest-faults` (run by `make test`) boots images broken on purpose
// (Image.Fault: init exits so the kernel panics, a test binary is left out,
// the first test binary hangs) and checks that each fails the run with the
// message that names it.
package vmtest
