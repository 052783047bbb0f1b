// Package testutil gates nodeshim's privileged tests.
//
// A privileged test runs for real against the kernel of the machine it is on.
// When the machine cannot run it (not root, a kernel feature provably absent),
// the test is skipped with the reason, unless NODESHIM_REQUIRE_PRIVILEGED=1 is
// set, as `make test` does on CI: then the skip becomes a failure, so that a
// CI run can never pass by skipping.
package testutil

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// EnvRequirePrivileged names the environment variable that turns every skip
// through this package into a failure.
const EnvRequirePrivileged = "NODESHIM_REQUIRE_PRIVILEGED"

// EnvGuest names the environment variable that the kernel-matrix init script
// sets inside a QEMU guest (`make vmtest`). Its value is the guest's kernel
// label, e.g. "6.1".
const EnvGuest = "NODESHIM_GUEST"

// EnvGuestLacks names the environment variable in which the kernel-matrix
// init script lists, separated by spaces, the peers the guest does not have:
// programs outside nodeshim that some tests run or talk to, such as
// kube-apiserver, criu or go. testenv/vmtest decides the list.
const EnvGuestLacks = "NODESHIM_GUEST_LACKS"

// ErrNotSupported is what a facility returns, wrapped, when the kernel
// provably lacks a feature. Tests hand such errors to SkipIfNotSupported.
var ErrNotSupported = errors.New("not supported")

// PrivilegedRequired reports whether skips must fail (NODESHIM_REQUIRE_PRIVILEGED=1).
func PrivilegedRequired() bool {
	return os.Getenv(EnvRequirePrivileged) == "1"
}

// InGuest reports whether the test runs inside a kernel-matrix guest, and
// which kernel label the guest was booted with.
func InGuest() (string, bool) {
	v := os.Getenv(EnvGuest)
	return v, v != ""
}

// Skip skips t with the reason, or fails it when privileged tests are required.
func Skip(t testing.TB, format string, args ...any) {
	t.Helper()
	reason := fmt.Sprintf(format, args...)
	if PrivilegedRequired() {
		t.Fatalf("%s=1 but the test cannot run: %s", EnvRequirePrivileged, reason)
	}
	t.Skip(reason)
}

// RequireRoot gates a test that needs an effective uid of 0.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Skip(t, "needs root (euid %d)", os.Geteuid())
	}
}

// RequireFile gates a test on a path that a kernel feature provides, such as
// /sys/kernel/btf/vmlinux or /proc/pressure/memory.
func RequireFile(t testing.TB, path string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		Skip(t, "needs %s: %v", path, err)
	}
}

// RequireBinary gates a test on a program found on PATH and returns its path.
// A peer that the kernel-matrix guest lacks skips the test there (see
// SkipIfGuestLacks).
func RequireBinary(t testing.TB, name string) string {
	t.Helper()
	SkipIfGuestLacks(t, name)
	p, err := exec.LookPath(name)
	if err != nil {
		Skip(t, "needs %s on PATH: %v", name, err)
	}
	return p
}

// RequireTool gates a test on a program that make installs and names in
// the environment variable env (under .tools), or else one found on PATH,
// and returns its path.
func RequireTool(t testing.TB, env, name string) string {
	t.Helper()
	SkipIfGuestLacks(t, name)
	if p := os.Getenv(env); p != "" {
		RequireFile(t, p)
		return p
	}
	return RequireBinary(t, name)
}

// SkipIfGuestLacks skips t inside a kernel-matrix guest that lacks peer (the
// init script lists it in NODESHIM_GUEST_LACKS), with a reason that names the
// peer, and does so even when skips fail: the guest runs the host suite to
// test the kernel, and the host's run, which has the peer, covers the rest.
// Anywhere else it does nothing, so a missing peer on a host still fails
// under NODESHIM_REQUIRE_PRIVILEGED=1.
func SkipIfGuestLacks(t testing.TB, peer string) {
	t.Helper()
	label, ok := InGuest()
	if !ok || !slices.Contains(strings.Fields(os.Getenv(EnvGuestLacks)), peer) {
		return
	}
	t.Skipf("the kernel-matrix guest (kernel %s) has no %s: the host suite covers this test", label, peer)
}

// SkipIfNotSupported skips t when err says the kernel lacks a feature (it
// wraps ErrNotSupported), and fails t on any other non-nil error. Under
// NODESHIM_REQUIRE_PRIVILEGED=1 the skip is a failure too.
func SkipIfNotSupported(t testing.TB, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if errors.Is(err, ErrNotSupported) {
		Skip(t, "%v", err)
		return
	}
	t.Fatal(err)
}

// RequireGuest gates a test that needs a kernel-matrix guest (pure cgroup v2
// with every controller, working PSI triggers). On the host such tests are not
// compiled in at all: they carry the `vmtest` build tag, so this gate only
// guards against running a vmtest binary outside the guest.
func RequireGuest(t testing.TB) string {
	t.Helper()
	k, ok := InGuest()
	if !ok {
		Skip(t, "needs a kernel-matrix guest (%s unset); run `make vmtest`", EnvGuest)
	}
	return k
}
